""" "Did you mean": the known name closest to a mistyped one, for every error that names an
unknown deployment, instance, rule or strategy. Pure."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

CUTOFF = 0.6  # difflib's default: `dmeo` finds `demo`, `x` finds nothing


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known name most like `word`, or None when none is close."""
    found = difflib.get_close_matches(word, list(known), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """` (did you mean 'demo'?)` to end an error line with, or '' when no name is close."""
    match = closest(word, known)
    return f" (did you mean {match!r}?)" if match is not None and match != word else ""
