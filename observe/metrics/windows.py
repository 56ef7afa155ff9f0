"""Counters over windows: reset-corrected running totals per target, and snapshots of them so
that any window's increase is one subtraction.

A cumulative value that goes down means the process restarted (a crash, a restart, a mode
switch): from that scrape on, every series of the target counts its new value as the
increase since the reset, as Prometheus' increase() does. A reset is decided per target, not
per series, so that a histogram's buckets stay consistent with each other.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

from observe.metrics.samples import Key, Samples


@dataclass(frozen=True, slots=True)
class CounterTrack:
    raw: dict[Key, float]  # the values last scraped
    totals: dict[Key, float]  # reset-corrected: never go down
    resets: int = 0


def advance(track: CounterTrack | None, counters: Samples) -> CounterTrack:
    """The track after one more scrape of the same target."""
    if track is None:  # first sight: a baseline, no increase yet
        return CounterTrack(dict(counters), dict(counters))
    raw = track.raw
    reset = any(value < raw[key] for key, value in counters.items() if key in raw)
    totals = dict(track.totals)
    for key, value in counters.items():
        before = raw.get(key)
        # A series new on a known target counted from zero (it appears on its first event).
        increase = value if reset or before is None else value - before
        totals[key] = totals.get(key, 0.0) + increase
    return CounterTrack(dict(counters), totals, track.resets + int(reset))


@dataclass(frozen=True, slots=True)
class Delta:
    """Increases over a window: `span` seconds between the two snapshots compared."""

    span: float
    counts: dict[Key, float]

    def rate(self, increase: float | None) -> float | None:
        if increase is None or self.span <= 0:
            return None
        return increase / self.span


EMPTY = Delta(0.0, {})


class Snapshots:
    """(ts, totals) of one target: every one for the last `fine_s` seconds and one per
    `step_s` back to `keep_s`, which is what windows of 10 s, 1 min and 5 min need."""

    def __init__(self, keep_s: float = 310.0, fine_s: float = 12.0, step_s: float = 5.0) -> None:
        self.keep_s, self.fine_s, self.step_s = keep_s, fine_s, step_s
        self._fine: deque[tuple[float, dict[Key, float]]] = deque()
        self._coarse: deque[tuple[float, dict[Key, float]]] = deque()

    def add(self, ts: float, totals: dict[Key, float]) -> None:
        self._fine.append((ts, totals))
        while self._fine and self._fine[0][0] < ts - self.fine_s:
            self._fine.popleft()
        if not self._coarse or ts - self._coarse[-1][0] >= self.step_s:
            self._coarse.append((ts, totals))
        while self._coarse and self._coarse[0][0] < ts - self.keep_s:
            self._coarse.popleft()

    def latest(self) -> tuple[float, dict[Key, float]] | None:
        return self._fine[-1] if self._fine else None

    def at(self, ts: float) -> tuple[float, dict[Key, float]] | None:
        """The newest snapshot taken at or before `ts`, else the oldest one kept."""
        for ring in (self._fine, self._coarse):
            if ring and ring[0][0] <= ts:
                i = bisect_right([t for t, _ in ring], ts) - 1
                return ring[i]
        oldest = [r[0] for r in (self._coarse, self._fine) if r]
        return min(oldest, key=lambda snap: snap[0]) if oldest else None

    def delta(self, seconds: float) -> Delta:
        """Increases over the last `seconds` (up to the latest snapshot)."""
        latest = self.latest()
        if latest is None:
            return EMPTY
        now, totals = latest
        base = self.at(now - seconds)
        if base is None or base[0] >= now:
            return Delta(0.0, dict.fromkeys(totals, 0.0))
        then, before = base
        return Delta(now - then, {k: v - before.get(k, 0.0) for k, v in totals.items()})
