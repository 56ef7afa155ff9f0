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
