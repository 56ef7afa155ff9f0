"""Pure per-request timing as the client sees it, and SLO judgement.

Times are seconds on one monotonic clock. TTFT = first token event - arrival; every gap between
token events is one ITL sample; TPOT = (end - first token) / (output tokens - 1); as in
`vllm bench serve` (PROTOCOL.md section 5). A target is met when the value is at most the target,
as vLLM's --goodput judges. A request with no ITL sample (one token) meets the ITL target.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

ITL_STATS = ("mean", "p99", "max")


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def itl_stat(itls: Sequence[float], stat: str) -> float | None:
    if not itls:
        return None
    if stat == "mean":
        return sum(itls) / len(itls)
    if stat == "p99":
        return percentile(itls, 99.0)
    if stat == "max":
        return max(itls)
    raise ValueError(f"unknown ITL statistic {stat!r}; expected one of {ITL_STATS}")


@dataclass(frozen=True, slots=True)
class SloTargets:
    ttft_ms: float | None = None
    itl_ms: float | None = None
    tpot_ms: float | None = None
    itl_stat: str = "mean"

    def __post_init__(self) -> None:
        if self.itl_stat not in ITL_STATS:
            raise ValueError(f"unknown ITL statistic {self.itl_stat!r}; expected {ITL_STATS}")

    @property
    def names(self) -> list[str]:
        return [n for n in ("ttft", "itl", "tpot") if getattr(self, f"{n}_ms") is not None]


@dataclass(slots=True)
class RequestTiming:
    ttft: float
    e2e: float
    itls: list[float] = field(default_factory=list)
    tpot: float | None = None
    prefill_leg: float | None = None
    transfer_first_decode: float | None = None
    output_tokens: int = 0


def summarize(
    arrival: float,
    end: float,
    token_times: Sequence[float],
    output_tokens: int,
    prefill_start: float | None = None,
    prefill_end: float | None = None,
) -> RequestTiming:
    """Timing of one finished request. A non-streamed request has no token times: TTFT = e2e."""
    first = token_times[0] if token_times else end
    itls = [b - a for a, b in itertools.pairwise(token_times)]
    tpot = (end - first) / (output_tokens - 1) if output_tokens > 1 else None
    prefill_leg = transfer = None
    if prefill_start is not None and prefill_end is not None:
        prefill_leg = prefill_end - prefill_start
        transfer = max(0.0, first - prefill_end)
    return RequestTiming(
        ttft=first - arrival,
        e2e=end - arrival,
        itls=itls,
        tpot=tpot,
        prefill_leg=prefill_leg,
        transfer_first_decode=transfer,
        output_tokens=output_tokens,
    )


def judge(timing: RequestTiming, targets: SloTargets) -> dict[str, bool]:
    """Which set targets the request met, plus "all" (every set target met)."""
    met: dict[str, bool] = {}
    if targets.ttft_ms is not None:
        met["ttft"] = timing.ttft * 1000.0 <= targets.ttft_ms
    if targets.itl_ms is not None:
        value = itl_stat(timing.itls, targets.itl_stat)
        met["itl"] = value is None or value * 1000.0 <= targets.itl_ms
    if targets.tpot_ms is not None:
        met["tpot"] = timing.tpot is None or timing.tpot * 1000.0 <= targets.tpot_ms
    met["all"] = all(met.values())
    return met
