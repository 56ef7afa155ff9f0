"""The stand-in's /metrics: vLLM's metric names, types, labels and buckets (PROTOCOL.md 4).

Histograms observe modelled times. A custom collector reads the scheduler's counters at
scrape time instead of mirroring them into gauges all over the code. Families, types, labels
and buckets match vLLM 0.32's (tests/fixtures/vllm/*_metrics.txt, checked by
tests/simulator/test_conformance.py), `*_created` gauges included;
simulator/metrics/vllm_families.py
builds them, this module adds the stand-in's own pdctl_sim_* families.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from domain.measures.vllm_metrics import (
    ITERATION_TOKEN_BUCKETS,
    ITL_BUCKETS,
    PARAMS_N_BUCKETS,
    PREEMPTION_BUCKETS,
    REQUEST_BUCKETS,
    TRANSFER_BUCKETS,
    TTFT_BUCKETS,
    BucketHistogram,
    length_buckets,
)
from simulator.engine.request import EngineRequest
from simulator.engine.scheduler import Scheduler, StepOutput
from simulator.metrics.families import gauge
from simulator.metrics.vllm_families import vllm_families
from simulator.model.frontend_clock import FrontendClock


class EngineMetrics:
    """Observations the scheduler does not keep itself, and the collector over both."""

    def __init__(
        self,
        scheduler: Scheduler,
        model_name: str,
        max_model_len: int,
        time_scale: float,
        transfer_prefix: str | None,
        kv_role: str | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.labels = {"model_name": model_name, "engine": "0"}
        self.time_scale = time_scale
        self.max_model_len = max_model_len
        # "nixl" | "moriio": the connector's own vllm:<prefix>_* transfer metrics; None: none
        # (no connector, another one, or an older MoRIIO that exports none)
        self.transfer_prefix = transfer_prefix
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
        self.transfer = {name: BucketHistogram(b) for name, b in TRANSFER_BUCKETS.items()}
        self.failed_transfers = 0
        self.failed_notifications = 0
        self.wire_bytes = {"sent": 0, "received": 0}
        self.transfers = {"ok": 0, "failed": 0}
        # A prefill's pull-backs of an earlier turn's KV by outcome (simulator/kv/pullback.py)
        self.pullbacks = dict.fromkeys(("ok", "failed", "mismatch", "off"), 0)
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
            if req.is_finished:  # the last token, or aborted while this step ran
                last_token.pop(rid, None)
            else:
                last_token[rid] = end
        for req in out.finished:
            self._finished(req)
            last_token.pop(req.request_id, None)

    def forget(self, request_id: str) -> None:
        """The server answered: a request aborted between steps reaches no `out` again."""
        self._last_token.pop(request_id, None)

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
        """One KV transfer done, as the connector's worker records it (NIXL's and newer
        MoRIIO's stats take the same four figures)."""
        t = self.transfer
        t["xfer_time_seconds"].observe(modelled_s)
        t["post_time_seconds"].observe(min(modelled_s, 0.0005))
        t["bytes_transferred"].observe(modelled_bytes)
        t["num_descriptors"].observe(blocks)

    # ---- the collector ------------------------------------------------------------------

    def collect(self) -> Iterable[Metric]:
        yield from vllm_families(self)
        names, values = list(self.labels), list(self.labels.values())
        yield from self._own_families(names, values)

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
        pullbacks = CounterMetricFamily(
            "pdctl_sim_kv_pullbacks",
            "Prefills given an earlier turn's KV params (bidirectional KV), by outcome.",
            labels=[*names, "outcome"],
        )
        for outcome, value in self.pullbacks.items():
            pullbacks.add_metric([*values, outcome], value)
        yield pullbacks
        overrun = CounterMetricFamily(
            "pdctl_sim_transfer_overrun",
            "Transfers whose wire copy took longer than the modelled transfer.",
            labels=names,
        )
        overrun.add_metric(values, self.transfer_overruns)
        yield overrun
        yield gauge(
            "pdctl_sim_loop_lag_seconds",
            "Wall seconds the last engine step ended "
            "late (event-loop lag); large values bend every figure.",
            names,
            values,
            self.loop_lag_s,
        )
        yield gauge(
            "pdctl_sim_time_scale",
            "How many times slower than modelled this "
            "stand-in runs; every reported time is modelled.",
            names,
            values,
            self.time_scale,
        )


def registry_for(
    metrics: EngineMetrics, frontend: FrontendClock | None = None
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    # vLLM serves prometheus_client's default registry, so its /metrics opens with the
    # process_* and python_* families (process CPU is what tells a busy frontend).
    if frontend is None:
        ProcessCollector(registry=registry)
    else:
        registry.register(ApiServerProcess(frontend))
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class ApiServerProcess:
    """prometheus_client's process_* families, with process_cpu_seconds_total the modelled
    API server's (simulator/model/frontend_clock.py): vLLM's API server process holds no engine."""

    def __init__(self, frontend: FrontendClock) -> None:
        self.frontend = frontend
        self.process = ProcessCollector(registry=None)

    def collect(self) -> Iterable[Metric]:
        for family in self.process.collect():
            if family.name != "process_cpu_seconds":
                yield family
                continue
            yield CounterMetricFamily(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                value=self.frontend.cpu_seconds(),
            )
