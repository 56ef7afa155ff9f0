"""What happened to one request, and whether it met the SLO.

Times are seconds on the client's monotonic clock, measured as `vllm bench serve` does: from
just before the request is sent. Pure: the client fills records, the judgement reads them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from domain.measures import slo
from domain.measures.slo import ITL_STATS, SloTargets, Verdict, itl_statistic, percentile

REJECTED_STATUSES = frozenset({429, 503})

__all__ = [
    "ITL_STATS",
    "REJECTED_STATUSES",
    "RequestRecord",
    "SloTargets",
    "Verdict",
    "itl_statistic",
    "judge",
    "percentile",
]


@dataclass
class RequestRecord:
    """One request as the client saw it; `ok` False means it failed and `error` says why.

    `start` is when it was sent, in seconds from the start of its run; `index` is its place
    in the dataset. Latencies are seconds; `e2el` ends at the last token (vLLM's `latency`),
    so the usage chunk and [DONE] after it do not count.
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
    # where its TTFT went, as a pdctl proxy reports it (domain/measures/ttft_parts.py); None
    # elsewhere
    ttft_parts: dict[str, Any] | None = None
    # the HTTP status the server answered (None: no answer, e.g. refused or timed out)
    status: int | None = None
    # the answering engine's own timing, ms (domain/measures/per_request_metrics.py); None: none
    # sent
    engine_metrics: dict[str, float] | None = None

    @property
    def rejected(self) -> bool:
        """Refused before any work: nothing could serve it (503) or the server would not take
        more (429). A failed request as any other, counted apart to say why."""
        return self.status in REJECTED_STATUSES

    @property
    def tpot(self) -> float | None:
        """(latency - ttft) / (output tokens - 1); undefined for one output token."""
        if self.output_tokens <= 1:
            return None
        return (self.e2el - self.ttft) / (self.output_tokens - 1)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def judge(record: RequestRecord, targets: SloTargets) -> Verdict:
    """A failed request meets nothing; a request with no gaps (one token) cannot break ITL/TPOT
    (domain/measures/slo.py, the judge the proxy and the planner use too)."""
    itl = itl_statistic(record.itl, targets.itl_stat)
    return slo.judge(targets, record.ttft, itl, record.tpot, ok=record.ok)
