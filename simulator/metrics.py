"""The stand-in's /metrics: vLLM's metric names, types, labels and buckets (PROTOCOL.md 4).

Histograms observe modelled times. A custom collector reads the scheduler's counters at
scrape time instead of mirroring them into gauges all over the code.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import CollectorRegistry

from simulator.request import EngineRequest
from simulator.scheduler import Scheduler, StepOutput

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
NIXL_XFER_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0,
                     2.0, 5.0)
NIXL_BYTES_BUCKETS = tuple(float(2**p) for p in range(11, 34))
NIXL_DESC_BUCKETS = tuple(float(10 * 2**p) for p in range(14))
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def length_buckets(max_len: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 series up to max_model_len."""
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exp
            if value > max_len:
                return tuple(float(v) for v in out)
            out.append(value)
        exp += 1


class BucketHistogram:
    """Cumulative-at-render histogram: counts per bucket, sum and count."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += times
        self.count += times
        self.sum += value * times

    def cumulative(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            out.append((_fmt(bound), running))
        out.append(("+Inf", self.count))
        return out


def _fmt(bound: float) -> str:
    return repr(float(bound))


class EngineMetrics:
    """Observations the scheduler does not keep itself, and the collector over both."""

    def __init__(self, scheduler: Scheduler, model_name: str, max_model_len: int,
                 time_scale: float, with_nixl: bool) -> None:
        self.scheduler = scheduler
        self.labels = {"model_name": model_name, "engine": "0"}
        self.time_scale = time_scale
        self.with_nixl = with_nixl
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
            "iteration_tokens_total": BucketHistogram(ITERATION_TOKEN_BUCKETS),
        }
        self.nixl = {
            "nixl_xfer_time_seconds": BucketHistogram(NIXL_XFER_BUCKETS),
            "nixl_post_time_seconds": BucketHistogram(NIXL_XFER_BUCKETS),
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
        if req.num_output_tokens > 1:
            h["request_time_per_output_token_seconds"].observe(
                (end - first) / (req.num_output_tokens - 1))

    def on_transfer(self, modelled_s: float, modelled_bytes: float, blocks: int) -> None:
        self.nixl["nixl_xfer_time_seconds"].observe(modelled_s)
        self.nixl["nixl_post_time_seconds"].observe(min(modelled_s, 0.0005))
        self.nixl["nixl_bytes_transferred"].observe(modelled_bytes)
        self.nixl["nixl_num_descriptors"].observe(blocks)

    # ---- the collector ------------------------------------------------------------------

    def collect(self) -> Iterable[Metric]:
        s, labels = self.scheduler, self.labels
        names, values = list(labels), list(labels.values())
        yield _gauge("vllm:num_requests_running", "Number of requests in model execution "
                     "batches.", names, values, s.num_running)
        yield _gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                     names, values, s.num_waiting)
        yield _gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                     names, values, s.kv_cache_usage)
        c = s.counters
        for name, doc, value in (
            ("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
             c.preemptions),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens),
            ("vllm:generation_tokens", "Number of generation tokens processed.",
             c.generation_tokens),
            ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried "
             "tokens.", c.prefix_cache_queries),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
             c.prefix_cache_hits),
        ):
            family = CounterMetricFamily(name, doc, labels=names)
            family.add_metric(values, value)
            yield family
        by_source = CounterMetricFamily(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
            labels=[*names, "source"])
        for source, value in (("local_compute", c.prompt_tokens_local_compute),
                              ("local_cache_hit", c.prompt_tokens_cache_hit),
                              ("external_kv_transfer", c.prompt_tokens_external)):
            by_source.add_metric([*values, source], value)
        yield by_source
        success = CounterMetricFamily("vllm:request_success", "Count of successfully processed "
                                      "requests.", labels=[*names, "finished_reason"])
        for reason in ("stop", "length", "abort", "error"):
            success.add_metric([*values, reason], c.finished.get(reason, 0))
        yield success
        for name, hist in self.hist.items():
            yield _histogram(f"vllm:{name}", hist, names, values)
        if self.with_nixl:
            for name, hist in self.nixl.items():
                yield _histogram(f"vllm:{name}", hist, names, values)
            for name, value in (("vllm:nixl_num_failed_transfers", self.nixl_failed_transfers),
                                ("vllm:nixl_num_failed_notifications",
                                 self.nixl_failed_notifications),
                                ("vllm:nixl_num_kv_expired_reqs", c.kv_expired_requests)):
                family = CounterMetricFamily(name, name.split(":")[1].replace("_", " "),
                                             labels=names)
                family.add_metric(values, value)
                yield family
        wire = CounterMetricFamily("pdctl_sim_wire_bytes", "KV bytes that really crossed the "
                                   "stand-in's sockets (scaled down from the modelled bytes).",
                                   labels=[*names, "direction"])
        for direction, value in self.wire_bytes.items():
            wire.add_metric([*values, direction], value)
        yield wire
        overrun = CounterMetricFamily("pdctl_sim_transfer_overrun", "Transfers whose wire "
                                      "copy took longer than the modelled transfer.",
                                      labels=names)
        overrun.add_metric(values, self.transfer_overruns)
        yield overrun
        yield _gauge("pdctl_sim_loop_lag_seconds", "Wall seconds the last engine step ended "
                     "late (event-loop lag); large values bend every figure.", names, values,
                     self.loop_lag_s)
        yield _gauge("pdctl_sim_time_scale", "How many times slower than modelled this "
                     "stand-in runs; every reported time is modelled.", names, values,
                     self.time_scale)


def _gauge(name: str, doc: str, names: list[str], values: list[str], value: float) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=names)
    family.add_metric(values, value)
    return family


def _histogram(name: str, hist: BucketHistogram, names: list[str], values: list[str]) -> Metric:
    family = HistogramMetricFamily(name, name.split(":")[-1].replace("_", " "), labels=names)
    family.add_metric(values, hist.cumulative(), hist.sum)
    return family


def registry_for(metrics: EngineMetrics) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)  # type: ignore[arg-type]
    return registry
