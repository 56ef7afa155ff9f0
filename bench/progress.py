"""`pdctl bench --progress-file F`: how far a run is, for a program watching it (the
dashboard's bench runs). The file always holds one whole JSON object, replaced atomically:

    {"done": 37, "failed": 0, "total": 40, "rate": 4.0, "rate_index": 1, "rates": 2}

`done` and `total` count requests over every rate of a sweep; `rate_index` is 0-based.
Writes are throttled, so a fast run does not spend its event loop on the disk; the last
request of each rate is always written.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from bench.records import RequestRecord
from bench.whole_file import write_whole

MIN_INTERVAL_S = 0.25


class ProgressFile:
    def __init__(
        self,
        path: Path,
        rates: tuple[float, ...],
        per_rate: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path, self.rates, self.per_rate, self.clock = path, rates, per_rate, clock
        self.done = self.failed = 0
        self._written_at = -MIN_INTERVAL_S
        self._write(0)

    def on_request(self, record: RequestRecord) -> None:
        """One more request finished (well or not). Rates run one after the other, each with
        `per_rate` requests, so the count says which rate is running."""
        self.done += 1
        self.failed += not record.ok
        index = min((self.done - 1) // self.per_rate, len(self.rates) - 1)
        rate_finished = self.done % self.per_rate == 0
        if rate_finished or self.clock() - self._written_at >= MIN_INTERVAL_S:
            with contextlib.suppress(OSError):  # advisory: a full disk must not fail the run
                self._write(index)

    def document(self, index: int) -> dict[str, object]:
        rate = self.rates[index]
        return {
            "done": self.done,
            "failed": self.failed,
            "total": self.per_rate * len(self.rates),
            "rate": rate if rate != float("inf") else "inf",
            "rate_index": index,
            "rates": len(self.rates),
        }

    def _write(self, index: int) -> None:
        self._written_at = self.clock()
        write_whole(self.path, json.dumps(self.document(index)))
