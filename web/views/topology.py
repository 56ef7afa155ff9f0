"""The deployment page's topology: the proxy, and each instance group with the instances that
serve its role. An instance moved to the other role at run time (role_switch.serving in the
spec, controller/spec/sections/role_switch.py) is drawn under the first group of the role it serves,
marked as moved, since that is where its requests go."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from controller import instance_roles
from state.store import Current


def topology(current: Current, units: list[dict[str, Any]]) -> dict[str, Any]:
    """The stored spec and ports, with live state where the supervisor has it."""
    by_name = {u["name"]: u for u in units}
    spec = current.spec
    serving = instance_roles(spec)
    groups = [_group(g) for g in spec.groups]
    home: dict[str, int] = {}  # role -> the index of the first group of that role
    for index, group in enumerate(spec.groups):
        home.setdefault(group.role.value, index)
    for index, group in enumerate(spec.groups):
        for i in range(group.count):
            name = f"{group.name}-{i}"
            serves = serving[name].value
            moved = serves != group.role.value
            row = _instance(current, group, i, by_name.get(name, {}))
            row.update(serves=serves, moved_from=group.role.value if moved else None)
            groups[home.get(serves, index) if moved else index]["instances"].append(row)
    proxy = by_name.get("proxy", {})
    return {
        "proxy": {
            "port": current.ports.proxy,
            "registry": current.ports.registry,
            "policy": spec.proxy.policy,
            "state": proxy.get("state", "STOPPED"),
            "pid": proxy.get("pid"),
            "restarts": proxy.get("restarts", 0),
            "health": proxy.get("health"),
            "url": proxy.get("url") or f"http://127.0.0.1:{current.ports.proxy}",
            **node_of(proxy),
        },
        "groups": groups,
    }


def _group(group: Any) -> dict[str, Any]:
    return {
        "name": group.name,
        "role": group.role.value,
        "tp": group.tp,
        "mode": group.mode.value if group.mode else None,
        "instances": [],
    }


def _instance(current: Current, group: Any, i: int, unit: dict[str, Any]) -> dict[str, Any]:
    name = f"{group.name}-{i}"
    ports = current.ports.instances.get(name)
    return {
        "name": name,
        "group": group.name,
        "tp": group.tp,
        "gpus": group.instance_gpus(i),
        "ports": ports.model_dump(exclude_none=True) if ports else {},
        "state": unit.get("state", "STOPPED"),
        "pid": unit.get("pid"),
        "uptime": unit.get("uptime"),
        "restarts": unit.get("restarts", 0),
        "health": unit.get("health"),
        "registration": unit.get("registration"),
        "url": unit.get("url"),
        "log_error": unit.get("log_error"),
        "degraded": unit.get("degraded"),
        **node_of(unit),
    }


def node_of(unit: dict[str, Any]) -> dict[str, Any]:
    """The node a process is on: its cluster node's id and address, or on one host none and
    the host its URL names (None before it was ever started)."""
    address = unit.get("address") or (urlsplit(unit["url"]).hostname if unit.get("url") else None)
    return {"node_id": unit.get("node"), "node_address": address}
