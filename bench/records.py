"""What happened to one request, and whether it met the SLO.

Times are seconds on the client's monotonic clock, measured as `vllm bench serve` does: from
just before the request is sent. Pure: the client fills records, the judgement reads them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

ITL_SLO_STATS = ("mean", "p99", "max")


@dataclass
class RequestRecord:
    """One request as the client saw it; `ok` False means it failed and `error` says why.

    `start` is when it was sent, in seconds from the start of its run; `index` is its place
    in the dataset. Latencies are seconds.
    """

    ok: bool = False
    error: str = ""
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    e2el: float = 0.0
    start: float = 0.0
    index: int = 0

    @property
    def tpot(self) -> float | None:
        """(latency - ttft) / (output tokens - 1); undefined for one output token."""
        if self.output_tokens <= 1:
            return None
        return (self.e2el - self.ttft) / (self.output_tokens - 1)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SloTargets:
    """Per-request targets in milliseconds; None means that target is not set."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    tpot_ms: float | None = None
    itl_stat: str = "p99"

    def __post_init__(self) -> None:
        if self.itl_stat not in ITL_SLO_STATS:
            raise ValueError(f"itl_stat must be one of {ITL_SLO_STATS}, got {self.itl_stat!r}")


@dataclass(frozen=True)
class SloVerdict:
    """Which targets one request met; a target that is not set counts as met."""

    ttft: bool
    itl: bool
    tpot: bool

    @property
    def attained(self) -> bool:
        return self.ttft and self.itl and self.tpot


def itl_statistic(itl: list[float], stat: str) -> float | None:
    """The per-request ITL figure the SLO is judged on; None when there were no gaps."""
    if not itl:
        return None
    if stat == "mean":
        return sum(itl) / len(itl)
    if stat == "max":
        return max(itl)
    if stat == "p99":
        return percentile(itl, 99)
    raise ValueError(f"unknown ITL statistic {stat!r}")


def judge(record: RequestRecord, targets: SloTargets) -> SloVerdict:
    """A failed request meets nothing; a request with no gaps (one token) cannot break ITL/TPOT.

    Met means at or under the target, as vLLM's --goodput judges.
    """
    if not record.ok:
        return SloVerdict(False, False, False)
    return SloVerdict(
        ttft=_within(record.ttft, targets.ttft_ms),
        itl=_within(itl_statistic(record.itl, targets.itl_stat), targets.itl_ms),
        tpot=_within(record.tpot, targets.tpot_ms),
    )


def percentile(values: list[float], p: float) -> float:
    """numpy's default (linear interpolation) percentile; 0.0 for no values, as vLLM reports."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * p / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _within(seconds: float | None, target_ms: float | None) -> bool:
    if target_ms is None or seconds is None:
        return True
    return seconds * 1000 <= target_ms
