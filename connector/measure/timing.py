"""Pure per-request timing as the client sees it, judged by the one SLO judge
(domain/measures/slo.py).

Times are seconds on one monotonic clock. TTFT = first token event - arrival; every gap between
token events is one ITL sample; TPOT = (end - first token) / (output tokens - 1); as in
`vllm bench serve` (PROTOCOL.md section 5). A target is met when the value is at most the target,
as vLLM's --goodput judges. A request with no ITL sample (one token) meets the ITL target.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from domain.measures import slo
from domain.measures.slo import SloTargets, itl_statistic, percentile
from domain.measures.ttft_parts import TtftParts

__all__ = ["RequestTiming", "SloTargets", "itl_figures", "itl_statistic", "judge", "summarize"]


@dataclass(slots=True)
class RequestTiming:
    ttft: float
    e2e: float
    itls: list[float] = field(default_factory=list)
    tpot: float | None = None
    prefill_leg: float | None = None
    transfer_first_decode: float | None = None
    output_tokens: int = 0
    # each ITL statistic (mean, p99, max) of this request, computed once; None: no gap
    itl_stats: dict[str, float | None] = field(default_factory=dict)
    parts: TtftParts | None = None  # where the TTFT went (domain/measures/ttft_parts.py)
    # the ITL samples in order, sorted once for the statistics, the histogram and the spikes
    sorted_itls: list[float] = field(default_factory=list)


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
    ordered = sorted(itls)
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
        itl_stats=itl_figures(itls, ordered),
        sorted_itls=ordered,
    )


def itl_figures(itls: list[float], ordered: list[float] | None = None) -> dict[str, float | None]:
    """Every per-request ITL statistic at once, exactly as `itl_statistic` computes each;
    `ordered`: the same samples sorted, when the caller has them."""
    if not itls:
        return {"mean": None, "p99": None, "max": None}
    ordered = ordered or sorted(itls)
    return {"mean": sum(itls) / len(itls), "p99": percentile(ordered, 99.0), "max": ordered[-1]}


def judge(timing: RequestTiming, targets: SloTargets) -> dict[str, bool]:
    """Which set targets the request met, plus "all" (every set target met)."""
    itl = timing.itl_stats[targets.itl_stat] if timing.itl_stats else None
    if not timing.itl_stats and timing.itls:  # built by hand, without summarize
        itl = itl_statistic(timing.itls, targets.itl_stat)
    verdict = slo.judge(targets, timing.ttft, itl, timing.tpot)
    met = {name: getattr(verdict, name) for name in targets.names}
    met["all"] = verdict.met
    return met
