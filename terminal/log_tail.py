"""Which lines of a freshly read log tail are new since the last read (`pdctl logs
--follow` reads the tail again and again). Pure."""

from __future__ import annotations


def fresh(previous: list[str], current: list[str]) -> tuple[list[str], bool]:
    """The lines of `current` after its overlap with the end of `previous`, and whether some
    were missed (no overlap: more was written between two reads than a tail holds)."""
    if not previous:
        return current, False
    for k in range(min(len(previous), len(current)), 0, -1):
        if previous[-k:] == current[:k]:
            return current[k:], False
    return current, True
