"""`Derived`: the advisor's signals by name, where each came from, and why each absent one is
absent (observe/advice/signals.py fills it from a live frame, observe/advice/result_signals.py from
a result).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Derived:
    """Signals by name, where each came from, and why each absent one is absent."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    absent: dict[str, str] = field(default_factory=dict)
    # The live frame's `evidence` (observe/frames.py Evidence): is the window one to decide
    # from? None: not from a live window (a bench or plan result is its own evidence)
    evidence: dict[str, Any] | None = None

    @property
    def not_enough(self) -> str | None:
        """Why the window decides nothing ("not enough evidence (...)"), or None."""
        if self.evidence is None or self.evidence.get("enough", True):
            return None
        return self.evidence.get("why") or "not enough evidence"

    def put(self, name: str, value: Any, source: str, why_not: str = "") -> None:
        """Record `value` (a finite number or a word) or, when it is None, why not."""
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            self.absent[name] = why_not or f"{source}: not in the data"
            return
        self.values[name] = float(f"{value:.6g}") if isinstance(value, float) else value
        self.sources[name] = source

    def miss(self, name: str, why: str) -> None:
        self.absent[name] = why
