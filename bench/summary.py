"""A run's result in `vllm bench serve`'s field names, plus SLO attainment and sweeps.

Pure: records and the measured duration in, a flat dict out. Latencies are reported in ms;
TTFT, TPOT and E2EL are per successful request and ITL pools every gap of every successful
request, as vLLM does.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.records import RequestRecord, SloTargets, judge, percentile
from domain.measures.slo import max_goodput_rate

__all__ = ["loop_lag", "max_goodput_rate", "summarize", "sweep_result"]

LAG_SHARE_OF_ITL = 0.10  # loop lag above this share of the ITL target makes ITL untrustworthy


@dataclass(frozen=True)
class LoopLag:
    """How late the bench's own event loop ran; lag inflates every latency it measures."""

    max_ms: float
    p99_ms: float
    samples: int

    def exceeds(self, itl_target_ms: float | None) -> bool:
        return itl_target_ms is not None and self.max_ms > LAG_SHARE_OF_ITL * itl_target_ms


def loop_lag(samples: Sequence[float]) -> LoopLag:
    """Summarize lateness samples (seconds) of the ticker."""
    values = list(samples)
    return LoopLag(
        max_ms=max(values, default=0.0) * 1000,
        p99_ms=(percentile(values, 99) or 0.0) * 1000,
        samples=len(values),
    )


def summarize(
    records: Sequence[RequestRecord], duration: float, targets: SloTargets
) -> dict[str, Any]:
    """The result fields of one run; `duration` is from the first arrival to the last answer."""
    good = [r for r in records if r.ok]
    verdicts = [judge(r, targets) for r in good]
    attained = sum(v.met for v in verdicts)
    total_output = sum(r.output_tokens for r in good)
    total_input = sum(r.prompt_tokens for r in good)
    per_second = 1 / duration if duration > 0 else 0.0
    rejected = sum(r.rejected for r in records)
    result: dict[str, Any] = {
        "duration": duration,
        "completed": len(good),
        "failed": len(records) - len(good),
        # of the failed, those refused before any work (503, 429); share of every request
        "rejected": rejected,
        "rejected_share": rejected / len(records) if records else 0.0,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(good) * per_second,
        "request_goodput": attained * per_second,
        "output_throughput": total_output * per_second,
        "total_token_throughput": (total_input + total_output) * per_second,
    }
    tpots = [t for r in good if (t := r.tpot) is not None]
    for name, seconds in (
        ("ttft", [r.ttft for r in good]),
        ("tpot", tpots),
        ("itl", [gap for r in good for gap in r.itl]),
        ("e2el", [r.e2el for r in good]),
    ):
        result.update(_latency_fields(name, seconds))
    result.update(
        {
            "slo_attainment": attained / len(records) if records else 0.0,
            "itl_slo_stat": targets.itl_stat,
            "slo_ttft_ms": targets.ttft_ms,
            "slo_itl_ms": targets.itl_ms,
            "slo_tpot_ms": targets.tpot_ms,
            "met_ttft": _met_count(targets.ttft_ms, [v.ttft for v in verdicts]),
            "met_itl": _met_count(targets.itl_ms, [v.itl for v in verdicts]),
            "met_tpot": _met_count(targets.tpot_ms, [v.tpot for v in verdicts]),
            "met_both": sum(v.ttft and v.itl for v in verdicts),
            "slo_attained": attained,
        }
    )
    if (timed := engine_timing(good)) is not None:
        result["engine_metrics"] = timed
    return result


def engine_timing(good: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """Medians of the answering engines' own per-request timing (vLLM's `metrics`), for the
    requests that carried it; None when none did. Behind a PD proxy the engine that answers
    is the decode: its queue (which holds its KV wait: vLLM schedules a decode leg once its
    KV is there) and its TTFT (scheduled -> first token: the first step), and
    `before_engine` the rest of each client TTFT (the prefill leg, the proxy, the hops),
    which no engine timed for this client."""
    timed = [r for r in good if r.engine_metrics]
    if not timed:
        return None

    def median(values: list[float]) -> float | None:
        return percentile(values, 50) if values else None

    def field(name: str) -> list[float]:
        return [m[name] for r in timed if (m := r.engine_metrics) and name in m]

    before = [
        r.ttft * 1000 - m["queue_time_ms"] - m["time_to_first_token_ms"]
        for r in timed
        if (m := r.engine_metrics) and "queue_time_ms" in m and "time_to_first_token_ms" in m
    ]
    return {
        "requests": len(timed),
        "source": "responses' metrics (vLLM --enable-per-request-metrics): the answering engine",
        "median_queue_time_ms": median(field("queue_time_ms")),
        "median_ttft_ms": median(field("time_to_first_token_ms")),
        "median_mean_itl_ms": median(field("mean_itl_ms")),
        "median_before_engine_ms": median(before),
    }


def sweep_result(runs: Sequence[dict[str, Any]], share: float) -> dict[str, Any]:
    """All runs of a sweep with the rate the deployment can sustain under the SLO."""
    points = [(run["request_rate"], run["slo_attainment"]) for run in runs]
    return {
        "goodput_share": share,
        "max_goodput_rate": max_goodput_rate(points, share),
        "runs": list(runs),
    }


def _latency_fields(name: str, seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        f"mean_{name}_ms": statistics.fmean(ms) if ms else 0.0,
        f"median_{name}_ms": percentile(ms, 50) or 0.0,  # vLLM reports 0 for no values
        f"std_{name}_ms": statistics.pstdev(ms) if ms else 0.0,
        f"p99_{name}_ms": percentile(ms, 99) or 0.0,
    }


def _met_count(target: float | None, met: list[bool]) -> int | None:
    return None if target is None else sum(met)
