"""What a bench run that did not finish keeps: the rates its `pdctl bench` had measured, which a
sweep writes to `--result-json` after each rate (whole, never torn: bench/whole_file.py).
Pure: the file's text in; the result to store and the words that say what was kept out."""

from __future__ import annotations

import json
from typing import Any

from services.bench_runs.compare import rate_runs


def kept_result(text: str | None) -> dict[str, Any] | None:
    """The document if it holds at least one measured rate; None for no file, a torn one or
    one not in the bench's shape, so nothing half-read is ever stored."""
    if not text:
        return None
    try:
        document = json.loads(text)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    runs = rate_runs(document)
    if not runs or not all(isinstance(r, dict) and "request_rate" in r for r in runs):
        return None
    return document


def kept_note(result: dict[str, Any] | None, offered: int) -> str:
    """`after 3 of 5 rates; kept 3`, or `after 0 of 1 rate; kept none`."""
    measured = len(rate_runs(result))
    return (
        f"after {measured} of {offered} rate{'' if offered == 1 else 's'}; "
        f"kept {measured or 'none'}"
    )
