"""Which role each instance serves, as `pdctl show` draws it: its group's, unless a runtime
role move changed it (`role_switch.serving` in the spec, controller/spec/sections/role_switch.py).
Pure: the API's JSON in; instance rows grouped by the role they serve, moved ones marked."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]
MOVED = " (moved)"


def moved(spec: Json) -> dict[str, str]:
    """Instance name -> the role it serves, for those serving another role than their group's."""
    serving = (spec.get("role_switch") or {}).get("serving") or {}
    own = {
        f"{g['name']}-{i}": g["role"]
        for g in spec.get("groups", [])
        for i in range(g.get("count", 1))
    }
    return {name: role for name, role in serving.items() if own.get(name, role) != role}


def by_serving_role(units: list[Json], spec: Json) -> list[Json]:
    """The rows, the proxy first, then each role's in the order the spec's groups name the
    roles: an instance under the role it serves, its role cell saying it moved."""
    away = moved(spec)
    order = ["proxy", *dict.fromkeys(g["role"] for g in spec.get("groups", []))]
    rows = [{**u, "role": away[u["name"]] + MOVED} if u["name"] in away else u for u in units]

    def rank(row: Json) -> int:
        role = str(row.get("role", "")).removesuffix(MOVED)
        return order.index(role) if role in order else len(order)

    return sorted(rows, key=rank)  # stable: each role's rows keep the API's order


def moved_notes(spec: Json) -> list[str]:
    """One line per moved instance: `decode-1 serves prefill (moved from its group decode)`."""
    groups = {
        f"{g['name']}-{i}": (g["name"], g["role"])
        for g in spec.get("groups", [])
        for i in range(g.get("count", 1))
    }
    return [
        f"{name} serves {role} (moved from its group {groups[name][0]}, {groups[name][1]})"
        for name, role in moved(spec).items()
        if name in groups
    ]
