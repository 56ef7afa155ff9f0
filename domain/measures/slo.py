"""SLO targets and the one judge of whether a request met them, used by the proxy, `pdctl
bench`, the planner and the dashboard alike, so they can never score one request
differently.

Each request has one ITL figure, a statistic of its own inter-token gaps: p99 by default, as
the deployment spec and the MORI-IO blog judge (SCENARIOS.md); mean and max on request.
Met means at or under the target, as vLLM's --goodput judges. A request with no gap (one
token) cannot break the ITL or TPOT target; a failed request meets nothing.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal


class ItlStat(enum.StrEnum):
    MEAN = "mean"
    P99 = "p99"
    MAX = "max"


DEFAULT_ITL_STAT = ItlStat.P99
ItlStatName = Literal["mean", "p99", "max"]  # the same, as a type for request schemas
ITL_STATS = tuple(s.value for s in ItlStat)


def percentile(
    values: Sequence[float], q: float, weights: Sequence[int] | None = None
) -> float | None:
    """numpy's default (linear interpolation) percentile, q in [0, 100]; None for no values.
    `weights` counts each value that many times (the planner keeps runs of equal gaps)."""
    if weights is None:
        ordered = sorted(values)
        if not ordered:
            return None
        pos = (len(ordered) - 1) * q / 100.0
        lo = math.floor(pos)
        hi = min(lo + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
    runs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
    total = sum(w for _, w in runs)
    if not total:
        return None
    pos = (total - 1) * q / 100.0
    lo = math.floor(pos)
    low_value = high_value = runs[-1][0]
    seen = 0
    for i, (value, weight) in enumerate(runs):
        if lo < seen + weight:
            low_value = value
            # the next position is in this run, or the first of the next one
            high_value = value if lo + 1 < seen + weight else runs[min(i + 1, len(runs) - 1)][0]
            break
        seen += weight
    return low_value + (high_value - low_value) * (pos - lo)


def itl_statistic(
    gaps: Sequence[float], stat: str, weights: Sequence[int] | None = None
) -> float | None:
    """The per-request ITL figure the SLO is judged on; None when there was no gap."""
    counts = weights if weights is not None else [1] * len(gaps)
    n = sum(counts)
    if not n:
        return None
    if stat == ItlStat.MEAN:
        return sum(g * c for g, c in zip(gaps, counts, strict=True)) / n
    if stat == ItlStat.MAX:
        return max(g for g, c in zip(gaps, counts, strict=True) if c)
    if stat == ItlStat.P99:
        return percentile(gaps, 99.0, weights)
    raise ValueError(f"unknown ITL statistic {stat!r}; expected one of {', '.join(ITL_STATS)}")


def parse_itl_stat(text: str) -> ItlStat:
    try:
        return ItlStat(text)
    except ValueError:
        raise ValueError(
            f"itl_stat: unknown ITL statistic {text!r}; expected one of {', '.join(ITL_STATS)}"
        ) from None


@dataclass(frozen=True, slots=True)
class SloTargets:
    """Per-request targets in milliseconds; None means that target is not set."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    tpot_ms: float | None = None
    itl_stat: ItlStat = DEFAULT_ITL_STAT

    def __post_init__(self) -> None:
        # Ranges are each door's to check, naming its own flag or field (`invalid_target`).
        object.__setattr__(self, "itl_stat", parse_itl_stat(str(self.itl_stat)))

    def invalid_target(self) -> str | None:
        """The first target that is not a positive, finite number of ms."""
        for name in ("ttft_ms", "itl_ms", "tpot_ms"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                return name
        return None

    @property
    def names(self) -> list[str]:
        return [n for n in ("ttft", "itl", "tpot") if getattr(self, f"{n}_ms") is not None]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Which targets one request met; a target that is not set counts as met."""

    ttft: bool
    itl: bool
    tpot: bool

    @property
    def met(self) -> bool:
        return self.ttft and self.itl and self.tpot


FAILED = Verdict(False, False, False)


def judge(
    targets: SloTargets,
    ttft_s: float | None,
    itl_s: float | None,
    tpot_s: float | None = None,
    ok: bool = True,
) -> Verdict:
    """The verdict on one request from its TTFT, its ITL figure (`itl_statistic` of its gaps
    by `targets.itl_stat`) and its TPOT, all in seconds. No TTFT means it never answered."""
    if not ok or ttft_s is None:
        return FAILED
    return Verdict(
        ttft=_within(ttft_s, targets.ttft_ms),
        itl=_within(itl_s, targets.itl_ms),
        tpot=_within(tpot_s, targets.tpot_ms),
    )


def _within(seconds: float | None, target_ms: float | None) -> bool:
    return target_ms is None or seconds is None or seconds * 1000.0 <= target_ms


DEFAULT_GOODPUT_SHARE = 0.9


def max_goodput_rate(points: Sequence[tuple[float, float]], share: float) -> float | None:
    """Highest offered rate whose slo_attainment is at least `share`; None if no rate made it
    (ARCHITECTURE.md's max_goodput_rate)."""
    passing = [rate for rate, attainment in points if attainment >= share]
    return max(passing, default=None)
