"""What the engines' own counters say over one window: KV transfer between instances,
prefill work and CPU, and their TTFT/ITL histograms summed. Pure arithmetic over the
windows' increases (observe/metrics/windows.py Delta)."""

from __future__ import annotations

from collections.abc import Sequence

from domain.kv_connectors import metric_prefixes
from observe.frames import EngineWork, Histogram, KvTransfer
from observe.metrics.quantiles import histogram, quantile
from observe.metrics.samples import cumulative_buckets, family_present, total
from observe.metrics.windows import Delta

# Connectors whose engine reports its own transfers, by metric prefix (the engine's figures)
ENGINE_TRANSFER_SOURCES = metric_prefixes()
PREFILL_ROLES = ("prefill", "colocated")  # whose prompt tokens are computed, not received
DECODE_ROLES = ("decode", "colocated")  # whose generated tokens reach the client
RENDER = "render"  # a render tier instance: all frontend (controller/spec/sections/render_tier.py)


def kv_transfer(deltas: Sequence[Delta], kv_bytes_per_token: int | None) -> KvTransfer:
    """KV bytes/s between instances and transfer time percentiles: the engine's own figures
    (vllm:nixl_* or newer MoRIIO's vllm:moriio_*) when an instance exports them, else
    external prompt tokens x KV bytes per token ("derived", no time), else nothing."""
    for source in ENGINE_TRANSFER_SOURCES:
        if any(family_present(d.counts, f"vllm:{source}_bytes_transferred") for d in deltas):
            return _engine_transfer(deltas, source)
    tokens = [
        (d, total(d.counts, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer"))
        for d in deltas
    ]
    tokens = [(d, n) for d, n in tokens if n is not None]
    if tokens and kv_bytes_per_token is not None:
        rate = sum(d.rate(n) or 0.0 for d, n in tokens) * kv_bytes_per_token
        return {"bytes_per_s": rate, "source": "derived", "xfer_p50_ms": None, "xfer_p99_ms": None}
    return {"bytes_per_s": None, "source": None, "xfer_p50_ms": None, "xfer_p99_ms": None}


def _engine_transfer(deltas: Sequence[Delta], source: str) -> KvTransfer:
    """The connector's own figures over the window: bytes/s, and time p50/p99 in ms."""
    rate = sum(
        d.rate(total(d.counts, f"vllm:{source}_bytes_transferred_sum")) or 0.0 for d in deltas
    )
    times = sum_buckets(
        cumulative_buckets(d.counts, f"vllm:{source}_xfer_time_seconds") for d in deltas
    )
    p50, p99 = quantile(0.5, times), quantile(0.99, times)
    return {
        "bytes_per_s": rate,
        "source": source,
        "xfer_p50_ms": None if p50 is None else p50 * 1000,
        "xfer_p99_ms": None if p99 is None else p99 * 1000,
    }


def engine_work(parts: Sequence[tuple[str | None, Delta]]) -> EngineWork:
    """What the engines' own counters say about prefill work over the window: prompt tokens
    per finished request and the prefix cache's hit rate (both on the roles that compute
    prompts), and the busiest instance's serving process CPU in cores."""
    prefill = [d for role, d in parts if role in PREFILL_ROLES]

    def summed(name: str, **labels: str) -> float | None:
        values = [v for d in prefill if (v := total(d.counts, name, **labels)) is not None]
        return sum(values) if values else None

    prompts, finished = summed("vllm:prompt_tokens_total"), summed("vllm:request_success_total")
    queries = summed("vllm:prefix_cache_queries_total")
    hits = summed("vllm:prefix_cache_hits_total")
    answers = [d for role, d in parts if role in DECODE_ROLES]
    generated = [v for d in answers if (v := total(d.counts, "vllm:generation_tokens_total"))]
    answered = [v for d in answers if (v := total(d.counts, "vllm:request_success_total"))]
    engine = [d.rate(total(d.counts, "process_cpu_seconds_total")) for r, d in parts if r != RENDER]
    cores = [c for c in engine if c is not None]
    # A render tier's process is all frontend (no engine in it): its CPU is the real figure.
    render = [d.rate(total(d.counts, "process_cpu_seconds_total")) for r, d in parts if r == RENDER]
    render_cores = [c for c in render if c is not None]
    return {
        "prompt_tokens_per_request": prompts / finished
        if prompts is not None and finished
        else None,
        "prefix_hit_rate": hits / queries if hits is not None and queries else None,
        "output_tokens_per_request": sum(generated) / sum(answered)
        if generated and answered
        else None,
        "cpu_cores_max": max(cores) if cores else None,
        "render_instances": len(render),
        "render_cpu_cores_max": max(render_cores) if render_cores else None,
    }


def first_tokens(deltas: Sequence[Delta]) -> float | None:
    """First tokens the answering engines gave over the window (None: none exports TTFT)."""
    counts = [n for d in deltas if (n := total(d.counts, "vllm:time_to_first_token_seconds_count"))]
    return sum(counts) if counts else None


def engine_histogram(deltas: Sequence[Delta], name: str) -> Histogram | None:
    buckets = sum_buckets(cumulative_buckets(d.counts, name) for d in deltas)
    return histogram(buckets) if buckets else None


def sum_buckets(parts) -> list[tuple[float, float]]:
    acc: dict[float, float] = {}
    for buckets in parts:
        for bound, count in buckets or ():
            acc[bound] = acc.get(bound, 0.0) + count
    return sorted(acc.items())
