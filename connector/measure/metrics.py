"""The proxy's Prometheus export: plain counters kept by the proxy, turned into metric families
by a custom collector on the app's own CollectorRegistry (never the global default one).
Buckets are vLLM's (PROTOCOL.md section 4), but for TTFT, ITL and TPOT, which add finer ones
in the range SLOs are set in (domain/measures/latency_buckets.py) so that the advisor's percentiles
can
tell a change inside one of vLLM's wide buckets.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from connector.measure.demand import KINDS as DEMAND_KINDS
from connector.measure.demand import ArrivalDemand
from connector.measure.timing import RequestTiming
from connector.pool.instances import InstancePool
from domain.measures.latency_buckets import PROXY_ITL_BUCKETS, PROXY_TTFT_BUCKETS
from domain.measures.vllm_metrics import REQUEST_BUCKETS, TTFT_BUCKETS, BucketHistogram

# vLLM's own buckets (PROTOCOL.md section 4), shared with the stand-in's /metrics.
E2E_BUCKETS = REQUEST_BUCKETS

OUTCOMES = ("ok", "failed", "rejected", "cancelled", "invalid")
SLO_TARGETS = ("ttft", "itl", "tpot", "all")


def _family(hist: BucketHistogram, name: str, doc: str) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, buckets=hist.cumulative(), sum_value=hist.sum)


_HISTOGRAMS = {
    "ttft": (PROXY_TTFT_BUCKETS, "Time to first token as the client sees it."),
    "itl": (PROXY_ITL_BUCKETS, "Each gap between streamed tokens as the client sees it."),
    "tpot": (PROXY_ITL_BUCKETS, "Per request: (end - first token) / (output tokens - 1)."),
    "e2e": (E2E_BUCKETS, "End-to-end request time as the client sees it."),
    "prefill_leg": (E2E_BUCKETS, "Prefill leg: request sent to prefill's answer."),
    "transfer_first_decode": (TTFT_BUCKETS, "Prefill's answer to the first decode token."),
}


class ProxyMetrics:
    """What the proxy counts: `arrived` as each client request comes in, `record` once it ends."""

    def __init__(self) -> None:
        self.histograms = {name: BucketHistogram(b) for name, (b, _) in _HISTOGRAMS.items()}
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.slo_met = dict.fromkeys(SLO_TARGETS, 0)
        self.loop_lag = 0.0
        self.in_flight = 0
        self.held = 0
        self.registry_rejected: dict[str, int] = {}  # reason -> registrations refused
        self.retries: dict[tuple[str, str], int] = {}  # (leg, cause) -> attempts retried
        # attempts | deadline | budget | no_prefill | no_decode -> not retried (attempts.py)
        self.retries_refused: dict[str, int] = {}
        self.ejections: dict[str, int] = {}  # cause -> instances ejected
        # ITL gaps above twice their request's median, and those that ended with another
        # request's prefill on the same instance (connector/measure/interference.py)
        self.itl_spikes = 0
        self.turns = dict.fromkeys(("first", "follow_up", "unknown"), 0)  # client_body.turn_kind
        self.itl_spikes_at_prefill = 0
        # Bidirectional KV (connector/dispatch/bidir_kv.py): follow-up turns by what their earlier
        # KV did (carried to the prefill, missed, expired), turns whose kept KV was filed, and
        # the prompt tokens the carried params named (the prefill's to pull, not compute)
        self.bidir = dict.fromkeys(("carried", "missed", "expired", "stored"), 0)
        self.bidir_tokens_offered = 0
        # The control plane's canaries by outcome, and requests with a forged canary header
        # (connector/dispatch/canary.py): neither kind is missing from the figures unannounced
        self.canaries: dict[str, int] = {}
        # Gaps between client requests arriving, as count, sum and sum of squares: any window's
        # mean and variance of the gaps (so its burstiness) follow from counter deltas.
        self.arrival_gaps = 0
        self.arrival_gap_seconds = 0.0
        self.arrival_gap_seconds_squared = 0.0
        self.last_arrival: float | None = None
        self.demand = (
            ArrivalDemand()
        )  # the tokens arriving requests bring (connector/measure/demand.py)

    def arrived(self, now: float) -> None:
        """A client request arrived at `now` (connector.dispatch.flight.clock); the first has no
        gap."""
        last, self.last_arrival = self.last_arrival, now
        if last is not None:
            gap = now - last
            self.arrival_gaps += 1
            self.arrival_gap_seconds += gap
            self.arrival_gap_seconds_squared += gap * gap

    def record(self, outcome: str, timing: RequestTiming | None, met: dict[str, bool]) -> None:
        self.outcomes[outcome] += 1
        for target, ok in met.items():
            if ok:
                self.slo_met[target] += 1
        if timing is None:
            return
        h = self.histograms
        h["ttft"].observe(timing.ttft)
        h["e2e"].observe(timing.e2e)
        _observe_gaps(h["itl"], timing.itls, timing.sorted_itls)
        if timing.tpot is not None:
            h["tpot"].observe(timing.tpot)
        if timing.prefill_leg is not None:
            h["prefill_leg"].observe(timing.prefill_leg)
        if timing.transfer_first_decode is not None:
            h["transfer_first_decode"].observe(timing.transfer_first_decode)


def _observe_gaps(itl: BucketHistogram, gaps: list[float], ordered: list[float]) -> None:
    """BucketHistogram.observe for each gap, at once: a gap goes to the first bucket whose
    bound is >= it, so bucket i gains the gaps <= bounds[i] less those <= bounds[i - 1],
    counted by bisecting the sorted gaps once per bound (not once per gap)."""
    n = len(gaps)
    if not n:
        return
    ordered = ordered or sorted(gaps)
    counts, below = itl.counts, 0
    for i, bound in enumerate(itl.bounds):
        upto = bisect_right(ordered, bound)
        counts[i] += upto - below
        below = upto
        if below == n:
            break
    counts[-1] += n - below
    itl.sum = sum(gaps, itl.sum)  # added in order from the running sum, as observe adds
    itl.count += n


class ProxyCollector(Collector):
    def __init__(self, metrics: ProxyMetrics, pool: InstancePool) -> None:
        self.metrics = metrics
        self.pool = pool

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        for name, (_, doc) in _HISTOGRAMS.items():
            yield _family(m.histograms[name], f"pdctl_proxy_{name}_seconds", doc)
        yield _by("pdctl_proxy_requests", "Requests by outcome.", "outcome", m.outcomes)
        yield _by("pdctl_proxy_slo_met", "Requests that met each SLO target.", "target", m.slo_met)
        yield _by(
            "pdctl_proxy_canary_requests",
            "Control-plane canaries by outcome (left out of every SLO figure), and requests "
            "with a forged canary header (verdict forged: measured as any request).",
            "verdict",
            m.canaries,
        )
        yield _by(
            "pdctl_proxy_turns",
            "Requests by turn: a chat carrying an earlier answer is a "
            "follow_up; completions are unknown.",
            "kind",
            m.turns,
        )
        yield _by(
            "pdctl_proxy_bidir_kv",
            "Bidirectional KV: follow-up turns carried, missed or expired; answers stored.",
            "outcome",
            m.bidir,
        )
        yield CounterMetricFamily(
            "pdctl_proxy_bidir_prompt_tokens_offered",
            "Prompt tokens whose KV a decode kept and the next turn's prefill was told to pull.",
            value=m.bidir_tokens_offered,
        )
        yield CounterMetricFamily(
            "pdctl_proxy_itl_spikes",
            "Token gaps above twice their request's median gap.",
            value=m.itl_spikes,
        )
        yield CounterMetricFamily(
            "pdctl_proxy_itl_spikes_at_prefill",
            "ITL spikes that ended as another request's "
            "prefill finished on the same instance (prefill interference).",
            value=m.itl_spikes_at_prefill,
        )
        yield CounterMetricFamily(
            "pdctl_proxy_arrival_gaps",
            "Gaps between consecutive client requests arriving.",
            value=m.arrival_gaps,
        )
        yield CounterMetricFamily(
            "pdctl_proxy_arrival_gap_seconds",
            "Sum of the gaps between client requests arriving.",
            value=m.arrival_gap_seconds,
        )
        yield CounterMetricFamily(
            "pdctl_proxy_arrival_gap_seconds_squared",
            "Sum of the squared gaps between client "
            "requests arriving (with the count and sum: their variance over any window).",
            value=m.arrival_gap_seconds_squared,
        )
        yield GaugeMetricFamily(
            "pdctl_proxy_loop_lag_seconds", "Event-loop lag of the proxy.", value=m.loop_lag
        )
        yield GaugeMetricFamily(
            "pdctl_proxy_in_flight_requests", "Requests being served now.", value=m.in_flight
        )
        yield GaugeMetricFamily(
            "pdctl_proxy_held_requests", "Requests held for a paused group.", value=m.held
        )
        yield from _demand_families(m.demand)
        refused = CounterMetricFamily(
            "pdctl_proxy_registry_rejected",
            "ZMQ registrations refused: malformed, or the registry full.",
            labels=["reason"],
        )
        for reason, n in m.registry_rejected.items():
            refused.add_metric([reason], n)
        yield refused
        yield from _retry_families(m)
        inst = GaugeMetricFamily(
            "pdctl_proxy_instance_outstanding_tokens",
            "Outstanding tokens per instance.",
            labels=["instance", "group", "role"],
        )
        up = GaugeMetricFamily(
            "pdctl_proxy_instance_up",
            "1 when the instance is healthy and not draining.",
            labels=["instance", "group", "role"],
        )
        for i in self.pool:
            inst.add_metric([i.url, i.mode, i.role], i.outstanding_tokens)
            up.add_metric([i.url, i.mode, i.role], 1 if i.available else 0)
        yield inst
        yield up


def _counted(name: str, doc: str, labels: list[str], counts: dict) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, n in counts.items():
        family.add_metric(list(key) if isinstance(key, tuple) else [key], n)
    return family


def _retry_families(m: ProxyMetrics) -> Iterator[Metric]:
    yield _counted(
        "pdctl_proxy_retries",
        "Failed attempts tried again before any byte reached the client, by the leg that "
        "failed and why (connector/legs/retry.py).",
        ["leg", "cause"],
        m.retries,
    )
    yield _counted(
        "pdctl_proxy_retries_refused",
        "Retryable failures not retried: attempts, deadline or budget spent, or no spare.",
        ["reason"],
        m.retries_refused,
    )
    yield _counted(
        "pdctl_proxy_ejections",
        "Instances ejected, by the failure that ejected them.",
        ["cause"],
        m.ejections,
    )


def make_registry(metrics: ProxyMetrics, pool: InstancePool) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProxyCollector(metrics, pool))
    return registry


def exposition(registry: CollectorRegistry) -> Callable[[], bytes]:
    return lambda: generate_latest(registry)


def _by(name: str, doc: str, label: str, counts: dict[str, int]) -> CounterMetricFamily:
    """A counter family with one label, one sample per key."""
    family = CounterMetricFamily(name, doc, labels=[label])
    for key, n in counts.items():
        family.add_metric([key], n)
    return family


def _demand_families(demand: ArrivalDemand) -> Iterator[Metric]:
    arrived = CounterMetricFamily(
        "pdctl_proxy_arrived_tokens",
        "Tokens the arriving client requests bring, as judged at arrival: prompt (its "
        "characters) and output (max_tokens), each scaled by what finished requests used.",
        labels=["kind"],
    )
    ratio = GaugeMetricFamily(
        "pdctl_proxy_arrived_tokens_ratio",
        "Usage over the estimate at arrival, over recently finished requests (decayed).",
        labels=["kind"],
    )
    for kind in DEMAND_KINDS:
        arrived.add_metric([kind], demand.tokens[kind])
        ratio.add_metric([kind], demand.ratio[kind])
    yield arrived
    yield ratio
