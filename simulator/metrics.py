"""The stand-in's /metrics: vLLM's metric names, types, labels and buckets (PROTOCOL.md 4).

Histograms observe modelled times. A custom collector reads the scheduler's counters at
scrape time instead of mirroring them into gauges all over the code. Families, types, labels
and buckets match vLLM 0.32's (tests/fixtures/vllm/*_metrics.txt, checked by
tests/simulator/test_conformance.py), `*_created` gauges included.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample

from domain.vllm_metrics import (
    ITERATION_TOKEN_BUCKETS,
    ITL_BUCKETS,
    NIXL_BYTES_BUCKETS,
    NIXL_DESC_BUCKETS,
    NIXL_POST_BUCKETS,
    NIXL_XFER_BUCKETS,
    PARAMS_N_BUCKETS,
    PREEMPTION_BUCKETS,
    REQUEST_BUCKETS,
    TTFT_BUCKETS,
    BucketHistogram,
    length_buckets,
)
from simulator.request import EngineRequest
from simulator.scheduler import Scheduler, StepOutput

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


class EngineMetrics:
    """Observations the scheduler does not keep itself, and the collector over both."""

    def __init__(
        self,
        scheduler: Scheduler,
        model_name: str,
        max_model_len: int,
        time_scale: float,
        with_nixl: bool,
        kv_role: str | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.labels = {"model_name": model_name, "engine": "0"}
        self.time_scale = time_scale
        self.max_model_len = max_model_len
        self.with_nixl = with_nixl
        self.kv_role = kv_role  # None: no KV connector
        self.created = time.time()
        lengths = length_buckets(max_model_len)
        self.hist = {
            "time_to_first_token_seconds": BucketHistogram(TTFT_BUCKETS),
            "inter_token_latency_seconds": BucketHistogram(ITL_BUCKETS),
            "request_time_per_output_token_seconds": BucketHistogram(ITL_BUCKETS),
            "e2e_request_latency_seconds": BucketHistogram(REQUEST_BUCKETS),
            "request_queue_time_seconds": BucketHistogram(REQUEST_BUCKETS),
            "request_inference_time_seconds": BucketHistogram(REQUEST_BUCKETS),
            "request_prefill_time_seconds": BucketHistogram(REQUEST_BUCKETS),
            "request_decode_time_seconds": BucketHistogram(REQUEST_BUCKETS),
            "request_prompt_tokens": BucketHistogram(lengths),
            "request_generation_tokens": BucketHistogram(lengths),
            "request_params_max_tokens": BucketHistogram(lengths),
            "request_max_num_generation_tokens": BucketHistogram(lengths),
            "request_params_n": BucketHistogram(PARAMS_N_BUCKETS),
            "request_num_preemptions": BucketHistogram(PREEMPTION_BUCKETS),
            "request_prefill_kv_computed_tokens": BucketHistogram(lengths),
            "iteration_tokens_total": BucketHistogram(ITERATION_TOKEN_BUCKETS),
        }
        self.nixl = {
            "nixl_xfer_time_seconds": BucketHistogram(NIXL_XFER_BUCKETS),
            "nixl_post_time_seconds": BucketHistogram(NIXL_POST_BUCKETS),
            "nixl_bytes_transferred": BucketHistogram(NIXL_BYTES_BUCKETS),
            "nixl_num_descriptors": BucketHistogram(NIXL_DESC_BUCKETS),
        }
        self.nixl_failed_transfers = 0
        self.nixl_failed_notifications = 0
        self.wire_bytes = {"sent": 0, "received": 0}
        self.transfers = {"ok": 0, "failed": 0}
        self.transfer_overruns = 0
        self.loop_lag_s = 0.0
        self._last_token: dict[str, float] = {}

    # ---- observations ---------------------------------------------------------------

    def on_step(self, out: StepOutput) -> None:
        h = self.hist
        h["iteration_tokens_total"].observe(out.batch.tokens, out.steps)
        itl = h["inter_token_latency_seconds"]
        first = set(map(id, out.first_tokens))
        end = out.end
        last_token = self._last_token
        for req in out.tokens:
            rid = req.request_id
            if id(req) in first:
                ttft = end - req.arrival_time
                h["time_to_first_token_seconds"].observe(ttft)
            else:
                prev = last_token.get(rid)
                if prev is not None:
                    if out.steps > 1:
                        itl.observe((end - prev) / out.steps, out.steps)
                    else:
                        itl.observe(end - prev)
            last_token[rid] = end
        for req in out.finished:
            self._finished(req)
            last_token.pop(req.request_id, None)

    def _finished(self, req: EngineRequest) -> None:
        h = self.hist
        end = req.finish_time or 0.0
        scheduled = req.scheduled_time if req.scheduled_time is not None else req.arrival_time
        first = req.first_token_time if req.first_token_time is not None else end
        h["e2e_request_latency_seconds"].observe(end - req.arrival_time)
        h["request_queue_time_seconds"].observe(scheduled - req.arrival_time)
        h["request_inference_time_seconds"].observe(end - scheduled)
        h["request_prefill_time_seconds"].observe(first - scheduled)
        h["request_decode_time_seconds"].observe(end - first)
        h["request_prompt_tokens"].observe(req.prompt_len)
        h["request_generation_tokens"].observe(req.num_output_tokens)
        h["request_params_max_tokens"].observe(req.max_tokens)
        h["request_max_num_generation_tokens"].observe(req.max_tokens)
        h["request_params_n"].observe(1)
        h["request_num_preemptions"].observe(req.preemptions)
        h["request_prefill_kv_computed_tokens"].observe(
            req.prompt_len - req.num_cached_tokens - req.num_external_tokens
        )
        if req.num_output_tokens > 1:
            h["request_time_per_output_token_seconds"].observe(
                (end - first) / (req.num_output_tokens - 1)
            )

    def on_transfer(self, modelled_s: float, modelled_bytes: float, blocks: int) -> None:
        self.nixl["nixl_xfer_time_seconds"].observe(modelled_s)
        self.nixl["nixl_post_time_seconds"].observe(min(modelled_s, 0.0005))
        self.nixl["nixl_bytes_transferred"].observe(modelled_bytes)
        self.nixl["nixl_num_descriptors"].observe(blocks)

    # ---- the collector ------------------------------------------------------------------

    def collect(self) -> Iterable[Metric]:
        s, labels, created = self.scheduler, self.labels, self.created
        names, values = list(labels), list(labels.values())
        yield _gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            names,
            values,
            s.num_running,
        )
        yield _gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            names,
            values,
            s.num_waiting,
        )
        # "deferred": waiting for its KV to arrive; vLLM's sum of reasons equals the above.
        yield _by_label(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason.",
            GaugeMetricFamily,
            names,
            values,
            "reason",
            {"capacity": len(s.waiting), "deferred": len(s.awaiting_kv)},
        )
        if self.kv_role not in (None, "kv_producer"):
            # The stand-in starts a load as soon as the blocks are reserved: in_progress.
            yield _by_label(
                "vllm:num_requests_kv_fetch_by_stage",
                "Number of waiting requests by async KV load stage.",
                GaugeMetricFamily,
                names,
                values,
                "stage",
                {"waiting_to_start": 0, "in_progress": len(s.awaiting_kv), "completed_waiting": 0},
            )
        yield _by_label(
            "vllm:engine_sleep_state",
            "Engine sleep state (the stand-in never sleeps).",
            GaugeMetricFamily,
            names,
            values,
            "sleep_state",
            {"awake": 1, "weights_offloaded": 0, "discard_all": 0},
        )
        yield _gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            names,
            values,
            s.kv_cache_usage,
        )
        c = s.counters
        connected = self.kv_role is not None
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
        yield _by_label(
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
        yield _by_label(
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
        yield _by_label(
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
        yield _by_label(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            CounterMetricFamily,
            ["model_name"],
            [labels["model_name"]],
            "reason",
            {"max_num_queued_reqs": 0, "max_num_queued_tokens": 0},
            created,
        )
        for name, hist in self.hist.items():
            yield _histogram(f"vllm:{name}", hist, names, values, created)
        yield self._cache_config_info()
        if self.with_nixl:
            for name, hist in self.nixl.items():
                yield _histogram(f"vllm:{name}", hist, names, values, created)
            for name, value in (
                ("vllm:nixl_num_failed_transfers", self.nixl_failed_transfers),
                ("vllm:nixl_num_failed_notifications", self.nixl_failed_notifications),
                ("vllm:nixl_num_kv_expired_reqs", c.kv_expired_requests),
                ("vllm:nixl_num_notifications_after_expiry", 0),
            ):
                family = CounterMetricFamily(
                    name, name.split(":")[1].replace("_", " "), labels=names
                )
                family.add_metric(values, value, created=created)
                yield family
        yield from self._own_families(names, values)

    def _cache_config_info(self) -> Metric:
        config, pool = self.scheduler.config, self.scheduler.pool
        tokens = pool.num_blocks * config.block_size
        info = {
            **CACHE_CONFIG_FIXED,
            "engine": self.labels["engine"],
            "block_size": str(config.block_size),
            "effective_attention_block_size": str(config.block_size),
            "enable_prefix_caching": str(config.enable_prefix_caching),
            "gpu_memory_utilization": str(config.gpu_memory_utilization),
            "kv_cache_max_concurrency": str(tokens / self.max_model_len),
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

    def _own_families(self, names: list[str], values: list[str]) -> Iterable[Metric]:
        """The stand-in's own pdctl_sim_* families (real vLLM has none of these)."""
        wire = CounterMetricFamily(
            "pdctl_sim_wire_bytes",
            "KV bytes that really crossed the "
            "stand-in's sockets (scaled down from the modelled bytes).",
            labels=[*names, "direction"],
        )
        for direction, value in self.wire_bytes.items():
            wire.add_metric([*values, direction], value)
        yield wire
        overrun = CounterMetricFamily(
            "pdctl_sim_transfer_overrun",
            "Transfers whose wire copy took longer than the modelled transfer.",
            labels=names,
        )
        overrun.add_metric(values, self.transfer_overruns)
        yield overrun
        yield _gauge(
            "pdctl_sim_loop_lag_seconds",
            "Wall seconds the last engine step ended "
            "late (event-loop lag); large values bend every figure.",
            names,
            values,
            self.loop_lag_s,
        )
        yield _gauge(
            "pdctl_sim_time_scale",
            "How many times slower than modelled this "
            "stand-in runs; every reported time is modelled.",
            names,
            values,
            self.time_scale,
        )


def _gauge(name: str, doc: str, names: list[str], values: list[str], value: float) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=names)
    family.add_metric(values, value)
    return family


def _by_label(
    name: str,
    doc: str,
    kind: type,
    names: list[str],
    values: list[str],
    label: str,
    by: dict[str, float],
    created: float | None = None,
) -> Metric:
    """One family with a sample per value of an extra label (reason, source, stage, ...)."""
    family = kind(name, doc, labels=[*names, label])
    for key, value in by.items():
        if created is None:
            family.add_metric([*values, key], value)
        else:
            family.add_metric([*values, key], value, created=created)
    return family


def _histogram(
    name: str, hist: BucketHistogram, names: list[str], values: list[str], created: float
) -> Metric:
    family = HistogramMetricFamily(name, name.split(":")[-1].replace("_", " "), labels=names)
    family.add_metric(values, hist.cumulative(), hist.sum)
    # HistogramMetricFamily takes no `created`; the text format shows it as a *_created gauge.
    family.samples.append(Sample(name + "_created", dict(zip(names, values, strict=True)), created))
    return family


def registry_for(metrics: EngineMetrics) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)  # type: ignore[arg-type]
    # vLLM serves prometheus_client's default registry, so its /metrics opens with the
    # process_* and python_* families (process CPU is what tells a busy frontend).
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
