"""What changed between two specs, field by field, in the API's /diff shape ({path, op, old,
new}), and the lines `pdctl apply` and `pdctl diff` print for it. Pure."""

from __future__ import annotations

import json
from typing import Any

_ABSENT = object()
_SIGN = {"added": "+", "removed": "-", "changed": "~"}


def changes(old: Any, new: Any, path: tuple = ()) -> list[dict[str, Any]]:
    """Every leaf that differs: keys in sorted order, list items by index."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            c
            for key in sorted(old.keys() | new.keys())
            for c in changes(old.get(key, _ABSENT), new.get(key, _ABSENT), (*path, key))
        ]
    if isinstance(old, list) and isinstance(new, list):
        return [
            c
            for i in range(max(len(old), len(new)))
            for c in changes(_at(old, i), _at(new, i), (*path, i))
        ]
    if old is _ABSENT:
        return [_change(path, "added", None, new)]
    if new is _ABSENT:
        return [_change(path, "removed", old, None)]
    return [] if old == new else [_change(path, "changed", old, new)]


def _at(items: list, i: int) -> Any:
    return items[i] if i < len(items) else _ABSENT


def _change(path: tuple, op: str, old: Any, new: Any) -> dict[str, Any]:
    return {"path": list(path), "op": op, "old": old, "new": new}


def lines(found: list[dict[str, Any]], prefix: str = "") -> list[str]:
    """One line per change: `~ groups.0.mode: "read" -> "write"`, `+ slo.tpot_ms: 30`."""
    out = []
    for c in found:
        field = prefix + ".".join(str(p) for p in c["path"])
        if c["op"] == "added":
            said = _value(c["new"])
        elif c["op"] == "removed":
            said = f"{_value(c['old'])} (removed)"
        else:
            said = f"{_value(c['old'])} -> {_value(c['new'])}"
        out.append(f"{_SIGN.get(c['op'], '?')} {field}: {said}")
    return out


def _value(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
