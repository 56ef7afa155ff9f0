"""Pure: numbers JSON cannot carry (NaN, Infinity, and numbers too large for a float, which
Python's json reads as Infinity) found in a parsed document, each by its place, so that a
request holding one is a 422 naming the field rather than a stored value that breaks pages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MESSAGE = "Input should be a finite number"
TYPE = "finite_number"


def non_finite(value: Any, loc: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """The place of every NaN or infinite number in `value`, walked depth first."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [loc]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in non_finite(v, (*loc, str(k)))]
    if isinstance(value, list | tuple):
        return [p for i, v in enumerate(value) for p in non_finite(v, (*loc, i))]
    return []


def problems(value: Any, prefix: tuple[str | int, ...] = ("body",)) -> list[dict[str, Any]]:
    """`non_finite` as FastAPI's 422 items."""
    return [{"loc": [*prefix, *p], "msg": MESSAGE, "type": TYPE} for p in non_finite(value)]


def json_safe(value: Any) -> Any:
    """`value` with each non-finite number replaced by its name ("Infinity", "-Infinity",
    "NaN"): stored data shown as it is, in a response JSON can carry."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
