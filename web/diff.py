"""Field-level differences between two JSON documents (two revisions of a deployment)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_ABSENT = object()


@dataclass(frozen=True, slots=True)
class Change:
    path: tuple[str | int, ...]
    old: Any  # None when added
    new: Any  # None when removed
    op: str  # "added" | "removed" | "changed"


def diff(old: Any, new: Any, path: tuple[str | int, ...] = ()) -> list[Change]:
    """Every leaf that differs, dict keys in sorted order and list items by index."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[Change] = []
        for key in sorted(old.keys() | new.keys()):
            out += diff(old.get(key, _ABSENT), new.get(key, _ABSENT), (*path, key))
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = []
        for i in range(max(len(old), len(new))):
            out += diff(
                old[i] if i < len(old) else _ABSENT, new[i] if i < len(new) else _ABSENT, (*path, i)
            )
        return out
    if old is _ABSENT:
        return [Change(path, None, new, "added")]
    if new is _ABSENT:
        return [Change(path, old, None, "removed")]
    return [] if old == new else [Change(path, old, new, "changed")]


# -- in words ----------------------------------------------------------------------------------


def describe(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The differences between two documents as lines a person reads: `field: old → new`
    with values written as YAML writes them, and a list of named items (a spec's groups)
    matched by name, an item that comes or goes told whole (`group decode removed (role
    decode, count 1, tp 1)`) with its unset fields left out."""
    lines: list[str] = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if _named_list(before) and _named_list(after):
            lines += _named_items(key, before, after)
            continue
        for c in diff(before, after, (key,)):
            lines.append(_line(c))
    return lines


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value)


def _named_items(key: str, old: list[dict], new: list[dict]) -> list[str]:
    noun = key[:-1] if key.endswith("s") else key
    was, now = {i["name"]: i for i in old}, {i["name"]: i for i in new}
    lines = []
    for name in [*was, *(n for n in now if n not in was)]:
        if name not in now:
            lines.append(f"{noun} {name} removed ({_fields(was[name])})")
        elif name not in was:
            lines.append(f"{noun} {name} added ({_fields(now[name])})")
        else:
            lines += [f"{noun} {name}: {_line(c)}" for c in diff(was[name], now[name])]
    return lines


def _line(c: Change) -> str:
    field = ".".join(str(p) for p in c.path)
    if c.op == "added":
        return f"{field}: set to {words(c.new)}"
    if c.op == "removed":
        return f"{field}: {words(c.old)} removed"
    return f"{field}: {words(c.old)} → {words(c.new)}"


def _fields(item: dict[str, Any]) -> str:
    return ", ".join(f"{k} {words(v)}" for k, v in item.items() if k != "name" and _set(v))


def _set(value: Any) -> bool:
    return value is not None and value != [] and value != {}


def words(value: Any) -> str:
    """A value as YAML writes it inline: none, true, 2, [a, b], {k: v}."""
    if value is None or value == [] or value == {}:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {words(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(words(v) for v in value) + "]"
    return str(value)
