"""The vLLM families of one stand-in engine at scrape time: the scheduler's gauges and
counters and EngineMetrics' histograms under vLLM 0.32's names, types, labels and buckets
(tests/fixtures/vllm/*_metrics.txt, checked by tests/simulator/test_conformance.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from domain.kv_connectors import by_metric_prefix
from simulator.metrics.families import by_label, gauge, histogram

if TYPE_CHECKING:
    from simulator.metrics.export import EngineMetrics

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
# vllm:cache_config_info labels the stand-in has no notion of, at vLLM 0.32's values.
CACHE_CONFIG_FIXED = {
    "_block_size_resolved": "True",
    "cache_dtype": "auto",
    "cache_hit_alignment_tokens": "None",
    "enable_mamba_shared_prefix_checkpoint": "False",
    "hash_block_size": "None",
    "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]",
    "kv_cache_layout": "None",
    "kv_cache_memory_bytes": "None",
    "kv_offloading_backend": "native",
    "kv_offloading_size": "None",
    "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "float32",
    "num_cpu_blocks": "None",
    "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256",
    "prefix_match_unit": "None",
    "replayssm_buffer_len": "16",
    "skip_page_size_padded": "None",
    "sliding_window": "None",
    "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False",
    "use_replayssm": "False",
    "user_specified_block_size": "False",
}


def vllm_families(metrics: EngineMetrics) -> Iterable[Metric]:
    """Every vLLM family the stand-in exports (its own pdctl_sim_* ones:
    simulator/metrics/export.py)."""
    s, labels, created = metrics.scheduler, metrics.labels, metrics.created
    names, values = list(labels), list(labels.values())
    yield gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        names,
        values,
        s.num_running,
    )
    yield gauge(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        names,
        values,
        s.num_waiting,
    )
    # "deferred": waiting for its KV to arrive; vLLM's sum of reasons equals the above.
    yield by_label(
        "vllm:num_requests_waiting_by_reason",
        "Number of waiting requests by reason.",
        GaugeMetricFamily,
        names,
        values,
        "reason",
        {"capacity": len(s.waiting), "deferred": len(s.awaiting_kv)},
    )
    if metrics.kv_role not in (None, "kv_producer"):
        # The stand-in starts a load as soon as the blocks are reserved: in_progress.
        yield by_label(
            "vllm:num_requests_kv_fetch_by_stage",
            "Number of waiting requests by async KV load stage.",
            GaugeMetricFamily,
            names,
            values,
            "stage",
            {"waiting_to_start": 0, "in_progress": len(s.awaiting_kv), "completed_waiting": 0},
        )
    yield by_label(
        "vllm:engine_sleep_state",
        "Engine sleep state (the stand-in never sleeps).",
        GaugeMetricFamily,
        names,
        values,
        "sleep_state",
        {"awake": 1, "weights_offloaded": 0, "discard_all": 0},
    )
    yield gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        names,
        values,
        s.kv_cache_usage,
    )
    c = s.counters
    connected = metrics.kv_role is not None
    cached = c.prompt_tokens_cache_hit + c.prompt_tokens_external
    for name, doc, value in (
        (
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            c.preemptions,
        ),
        ("vllm:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens),
        (
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            c.generation_tokens,
        ),
        (
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            c.prefix_cache_queries,
        ),
        (
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            c.prefix_cache_hits,
        ),
        (
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV "
            "connector cross-instance cache sharing, in terms of number of queried tokens.",
            c.prompt_tokens - c.prompt_tokens_cache_hit if connected else 0,
        ),
        (
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector "
            "cross-instance cache sharing, in terms of number of cached tokens.",
            c.prompt_tokens_external,
        ),
        # No multi-modal input in the stand-in: vLLM's own value for a text-only model.
        (
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
            0,
        ),
        (
            "vllm:mm_cache_hits",
            "Multi-modal cache hits, in terms of number of cached items.",
            0,
        ),
        (
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            cached,
        ),
    ):
        family = CounterMetricFamily(name, doc, labels=names)
        family.add_metric(values, value, created=created)
        yield family
    yield by_label(
        "vllm:prompt_tokens_by_source",
        "Number of prompt tokens by source.",
        CounterMetricFamily,
        names,
        values,
        "source",
        {
            "local_compute": c.prompt_tokens_local_compute,
            "local_cache_hit": c.prompt_tokens_cache_hit,
            "external_kv_transfer": c.prompt_tokens_external,
        },
        created,
    )
    yield by_label(
        "vllm:prompt_tokens_cached_by_source",
        "Prefix-cache hit tokens by the cache tier that supplied them.",
        CounterMetricFamily,
        names,
        values,
        "source",
        {
            "device": c.prompt_tokens_cache_hit,
            "host": 0,
            "p2p": c.prompt_tokens_external,
            "disk": 0,
            "external_unspecified": 0,
        },
        created,
    )
    yield by_label(
        "vllm:request_success",
        "Count of successfully processed requests.",
        CounterMetricFamily,
        names,
        values,
        "finished_reason",
        {r: c.finished.get(r, 0) for r in FINISHED_REASONS},
        created,
    )
    # No queue limits in the stand-in; vLLM labels this family without `engine`.
    yield by_label(
        "vllm:admission_rejections",
        "Number of admission attempts rejected by a queue limit, by reason.",
        CounterMetricFamily,
        ["model_name"],
        [labels["model_name"]],
        "reason",
        {"max_num_queued_reqs": 0, "max_num_queued_tokens": 0},
        created,
    )
    for name, hist in metrics.hist.items():
        yield histogram(f"vllm:{name}", hist, names, values, created)
    yield cache_config_info(metrics)
    if metrics.transfer_prefix is not None:
        yield from transfer_families(metrics, metrics.transfer_prefix, names, values, created)


COUNTERS = (
    "num_failed_transfers",
    "num_failed_notifications",
    "num_kv_expired_reqs",
    "num_notifications_after_expiry",
)


def transfer_help(prefix: str) -> Mapping[str, str]:
    """Help strings of vllm:<prefix>_*, as vLLM writes them: the connector backend's
    (domain/kv_connectors/; NIXL's from the vLLM 0.32 fixture, MoRIIO's from moriio/stats.py)."""
    backend = by_metric_prefix(prefix)
    if backend is None:
        raise ValueError(f"no KV connector exports vllm:{prefix}_* transfer metrics")
    return backend.metric_help


def transfer_families(
    metrics: EngineMetrics, prefix: str, names: list[str], values: list[str], created: float
) -> Iterable[Metric]:
    """vllm:<prefix>_* : the connector's transfer histograms and failure counters."""
    docs = transfer_help(prefix)
    for name, hist in metrics.transfer.items():
        yield histogram(f"vllm:{prefix}_{name}", hist, names, values, created, docs[name])
    counts = {
        "num_failed_transfers": metrics.failed_transfers,
        "num_failed_notifications": metrics.failed_notifications,
        "num_kv_expired_reqs": metrics.scheduler.counters.kv_expired_requests,
        "num_notifications_after_expiry": 0,
    }
    for name in (n for n in COUNTERS if n in docs):
        family = CounterMetricFamily(f"vllm:{prefix}_{name}", docs[name], labels=names)
        family.add_metric(values, counts[name], created=created)
        yield family


def cache_config_info(metrics: EngineMetrics) -> Metric:
    """vllm:cache_config_info: the engine's cache configuration as labels of a gauge of 1."""
    config, pool = metrics.scheduler.config, metrics.scheduler.pool
    tokens = pool.num_blocks * config.block_size
    info = {
        **CACHE_CONFIG_FIXED,
        "engine": metrics.labels["engine"],
        "block_size": str(config.block_size),
        "effective_attention_block_size": str(config.block_size),
        "enable_prefix_caching": str(config.enable_prefix_caching),
        "gpu_memory_utilization": str(config.gpu_memory_utilization),
        "kv_cache_max_concurrency": str(tokens / metrics.max_model_len),
        "kv_cache_size_tokens": str(tokens),
        "num_gpu_blocks": str(pool.num_blocks),
        "num_gpu_blocks_override": str(config.num_gpu_blocks or None),
    }
    family = GaugeMetricFamily(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        labels=sorted(info),
    )
    family.add_metric([info[k] for k in sorted(info)], 1.0)
    return family
