"""Frames from scraped state: one deployment, one window, no I/O. The shell (scraper.py)
hands in what it scraped; everything here is arithmetic over it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.kv_connectors import metric_prefixes
from observe.frames import (
    WINDOW_SECONDS,
    Arrivals,
    EngineWork,
    Frame,
    Headline,
    Histogram,
    InstanceRow,
    Interference,
    KvTransfer,
    PdHappening,
    Point,
    Requests,
    SloShown,
    Window,
)
from observe.pd_check import NOT_CHECKED
from observe.quantiles import histogram, quantile
from observe.samples import Samples, cumulative_buckets, family_present, total
from observe.saved_share import prompt_saved_share
from observe.windows import EMPTY, Delta

ENGINE_ROLES = ("decode", "colocated")  # whose engine TTFT/ITL is the one the client sees
TRACKED_PREFIXES = (
    "pdctl_proxy_",
    "pdctl_sim_loop_lag",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:nixl_xfer_time_seconds",
    "vllm:nixl_bytes_transferred",
    "vllm:nixl_num_failed_transfers",
    "vllm:moriio_xfer_time_seconds",
    "vllm:moriio_bytes_transferred",
    "vllm:moriio_num_failed_transfers",
    "vllm:prompt_tokens_by_source",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    # an attached deployment's TTFT parts (observe/attached_ttft.py)
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:prefix_cache_",
    "process_cpu_seconds",
)
# Connectors whose engine reports its own transfers, by metric prefix (the engine's figures)
ENGINE_TRANSFER_SOURCES = metric_prefixes()
PREFILL_ROLES = ("prefill", "colocated")  # whose prompt tokens are computed, not received
DECODE_ROLES = ("decode", "colocated")  # whose generated tokens reach the client
RENDER = "render"  # a render tier instance: all frontend (controller/spec/render_tier.py)
# Below this many gaps the moment estimate is too noisy to act on; at 20, a Poisson stream's
# shape still reads below the advisor's "bursty" line (0.5) about 2% of the time.
MIN_ARRIVAL_GAPS = 20


def tracked(family: str) -> bool:
    """The metric families the windows keep (see samples.parse's `keep`)."""
    return family.startswith(TRACKED_PREFIXES)


@dataclass(frozen=True, slots=True)
class DeploymentInfo:
    name: str
    simulated: bool
    slo: SloShown  # ttft_ms, itl_ms, itl_stat
    kv_bytes_per_token: int | None  # None: model unknown, no derived KV throughput


@dataclass(frozen=True, slots=True)
class TargetState:
    """One scraped process at this tick: its last gauges and its increases per window."""

    up: bool
    gauges: Samples = field(default_factory=dict)
    deltas: Mapping[str, Delta] = field(default_factory=dict)

    def delta(self, window: str) -> Delta:
        return self.deltas.get(window, EMPTY)


DOWN = TargetState(up=False)


def build_frame(
    info: DeploymentInfo,
    units: Sequence[Mapping[str, Any]],
    targets: Mapping[str, TargetState],
    window: Window,
    now: float,
    pd: PdHappening | None = None,
) -> Frame:
    """The frame for `window`; `units` are the controller's status rows (proxy included),
    `targets` the scraped state by unit name (a unit missing there counts as down), `pd` the
    "is PD happening?" section the shell's check state gave (observe/pd_check.py)."""
    proxy_unit = next((u for u in units if u.get("role") == "proxy"), None)
    proxy = targets.get(proxy_unit["name"], DOWN) if proxy_unit else DOWN
    instances = [u for u in units if u.get("role") != "proxy"]
    states = [(u, targets.get(u["name"], DOWN)) for u in instances]
    engine = [t.delta(window) for u, t in states if u.get("role") in ENGINE_ROLES and t.up]
    frame: Frame = {
        "type": "frame",
        "deployment": info.name,
        "ts": now,
        "window": window,
        "simulated": info.simulated,
        "slo": info.slo,
        "ttft": histogram(
            cumulative_buckets(proxy.delta(window).counts, "pdctl_proxy_ttft_seconds")
        ),
        "itl": histogram(cumulative_buckets(proxy.delta(window).counts, "pdctl_proxy_itl_seconds")),
        "engine_ttft": _engine_histogram(engine, "vllm:time_to_first_token_seconds"),
        "engine_itl": _engine_histogram(engine, "vllm:inter_token_latency_seconds"),
        **requests(proxy.delta(window), _first_tokens(engine)),
        "kv": kv_transfer([t.delta(window) for _, t in states if t.up], info.kv_bytes_per_token),
        "running": int(sum(_gauge(t.gauges, "vllm:num_requests_running") or 0 for _, t in states)),
        "waiting": int(sum(_gauge(t.gauges, "vllm:num_requests_waiting") or 0 for _, t in states)),
        "kv_cache_usage": _max(_gauge(t.gauges, "vllm:kv_cache_usage_perc") for _, t in states),
        "engines": engine_work([(u.get("role"), t.delta(window)) for u, t in states if t.up]),
        "interference": interference(proxy.delta(window)),
        "multi_turn_share": multi_turn_share(proxy.delta(window)),
        # bidirectional KV: prefills' prompt tokens pulled back, not computed (saved_share.py)
        "prompt_saved_share": prompt_saved_share(
            [(u.get("role"), t.delta(window)) for u, t in states if t.up]
        ),
        "arrivals": arrivals(proxy.delta(window)),
        "instances": [_instance(u, t) for u, t in states],
        "proxy": {
            "up": proxy.up,
            "in_flight": int(_gauge(proxy.gauges, "pdctl_proxy_in_flight_requests") or 0),
            "held": int(_gauge(proxy.gauges, "pdctl_proxy_held_requests") or 0),
            "loop_lag_s": _gauge(proxy.gauges, "pdctl_proxy_loop_lag_seconds"),
        },
        "pd": pd if pd is not None else NOT_CHECKED,
    }
    return frame


# The outcomes a client counts (connector/measure/metrics.py OUTCOMES): every one but
# "invalid", a request the client itself got wrong (400, 413), which says nothing of the
# deployment. A cancelled request is one whose client gave up, most often on time.
COUNTED_OUTCOMES = ("ok", "failed", "rejected", "cancelled")
ALL_OUTCOMES = (*COUNTED_OUTCOMES, "invalid")


def requests(delta: Delta, first_tokens: float | None = None) -> Requests:
    """slo_attainment, request_goodput, request_rate and outcomes from the proxy's counters,
    over every request that ended as a client sees it: met{target="all"} out of ok + failed +
    rejected + cancelled, as `vllm bench serve` counts a failed request. `first_tokens` is
    how many first tokens the decode engines gave in the window (see `attainment`)."""
    counts = delta.counts

    def outcome(name: str) -> float:
        return total(counts, "pdctl_proxy_requests_total", outcome=name) or 0.0

    ended = {name: outcome(name) for name in ALL_OUTCOMES}
    counted = sum(ended[name] for name in COUNTED_OUTCOMES)
    met = total(counts, "pdctl_proxy_slo_met_total", target="all")
    present = met is not None
    # arrivals count every client request, a client's invalid one too (it ends at once)
    arrived = (total(counts, "pdctl_proxy_arrival_gaps_total") or 0.0) - ended["invalid"]
    per_s = {name: delta.rate(n) or 0.0 for name, n in ended.items()}
    return {
        "slo_attainment": attainment(met, counted, arrived, first_tokens) if present else None,
        "request_goodput": delta.rate(met) if present else None,
        "request_rate": delta.rate(counted) if present else None,
        "rejected_share": ended["rejected"] / counted if present and counted > 0 else None,
        "outcomes": {
            "ok": per_s["ok"],
            "failed": per_s["failed"],
            "rejected": per_s["rejected"],
            "cancelled": per_s["cancelled"],
            "invalid": per_s["invalid"],
        },
    }


def attainment(
    met: float | None, ended: float, arrived: float, first_tokens: float | None
) -> float | None:
    """Met out of the requests that ended. None ended but some arrived: 0.0 (an outage whose
    requests hang or queue is a dip, not a gap), unless an engine gave first tokens in the
    window (long answers still streaming: nothing to judge yet). Nothing arrived: None."""
    if ended > 0:
        return (met or 0.0) / ended
    if arrived > 0 and not first_tokens:
        return 0.0
    return None


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
    times = _sum_buckets(
        cumulative_buckets(d.counts, f"vllm:{source}_xfer_time_seconds") for d in deltas
    )
    p50, p99 = quantile(0.5, times), quantile(0.99, times)
    return {
        "bytes_per_s": rate,
        "source": source,
        "xfer_p50_ms": None if p50 is None else p50 * 1000,
        "xfer_p99_ms": None if p99 is None else p99 * 1000,
    }


def multi_turn_share(delta: Delta) -> float | None:
    """Of the chat requests the proxy admitted, the share continuing a conversation (None:
    no chat request in the window; completions cannot say)."""
    follow_up = total(delta.counts, "pdctl_proxy_turns_total", kind="follow_up") or 0.0
    first = total(delta.counts, "pdctl_proxy_turns_total", kind="first") or 0.0
    return follow_up / (first + follow_up) if first + follow_up > 0 else None


def arrivals(delta: Delta) -> Arrivals:
    """Client requests arriving at the proxy: their rate, and the count and gamma shape of the
    gaps between them (None when the proxy exports no arrival counters)."""
    counts = delta.counts
    gaps = total(counts, "pdctl_proxy_arrival_gaps_total")
    seconds = total(counts, "pdctl_proxy_arrival_gap_seconds_total")
    squares = total(counts, "pdctl_proxy_arrival_gap_seconds_squared_total")
    shape = (
        None
        if gaps is None or seconds is None or squares is None
        else gamma_shape(gaps, seconds, squares)
    )
    return {
        "per_s": delta.rate(gaps),
        "gaps": None if gaps is None else round(gaps),
        "burstiness": shape,
        "prompt_tokens_per_s": delta.rate(
            total(counts, "pdctl_proxy_arrived_tokens_total", kind="prompt")
        ),
        "output_tokens_per_s": delta.rate(
            total(counts, "pdctl_proxy_arrived_tokens_total", kind="output")
        ),
    }


def gamma_shape(n: float, seconds: float, squares: float) -> float | None:
    """Method-of-moments gamma shape of `n` gaps from their sum and sum of squares: mean^2 /
    variance (1 = Poisson, < 1 burstier, > 1 more regular); None below MIN_ARRIVAL_GAPS gaps
    or with no spread."""
    if n < MIN_ARRIVAL_GAPS:
        return None
    mean = seconds / n
    variance = squares / n - mean * mean
    # Equal gaps leave a few ulps of rounding in the subtraction, not a spread.
    if variance <= 1e-9 * mean * mean:
        return None
    return mean * mean / variance


def interference(delta: Delta) -> Interference:
    """ITL spikes the proxy saw (gaps above twice their request's median) and the share that
    ended as another request's prefill finished on the same instance."""
    spikes = total(delta.counts, "pdctl_proxy_itl_spikes_total")
    at_prefill = total(delta.counts, "pdctl_proxy_itl_spikes_at_prefill_total")
    return {
        "spikes_per_s": delta.rate(spikes),
        "at_prefill_share": at_prefill / spikes
        if spikes and at_prefill is not None
        else (0.0 if spikes == 0 else None),
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


def headline(frame: Frame) -> Headline:
    """The few numbers a time series keeps: per window in a frame, per point in history."""
    ttft, itl = frame["ttft"], frame["itl"]
    return {
        "ttft_count": ttft["count"],
        "ttft_p50": ttft["p50"],
        "ttft_p90": ttft["p90"],
        "ttft_p99": ttft["p99"],
        "itl_count": itl["count"],
        "itl_p50": itl["p50"],
        "itl_p90": itl["p90"],
        "itl_p99": itl["p99"],
        "slo_attainment": frame["slo_attainment"],
        "request_goodput": frame["request_goodput"],
        "request_rate": frame["request_rate"],
        "rejected_share": frame["rejected_share"],
        "rejected_rate": frame["outcomes"]["rejected"],
        "kv_bytes_per_s": frame["kv"]["bytes_per_s"],
    }


def point(frame: Frame) -> Point:
    """One history point: the headline plus the engines' load at that moment."""
    return {
        "ts": frame["ts"],
        **headline(frame),
        "xfer_p50_ms": frame["kv"]["xfer_p50_ms"],
        "xfer_p99_ms": frame["kv"]["xfer_p99_ms"],
        "running": frame["running"],
        "waiting": frame["waiting"],
        "kv_cache_usage": frame["kv_cache_usage"],
    }


def with_windows(frame: Frame, frames: Mapping[str, Frame]) -> Frame:
    """`frame` plus the headline of every window (so a page can show all three at once)."""
    return {**frame, "windows": {w: headline(f) for w, f in frames.items()}}


def _first_tokens(deltas: Sequence[Delta]) -> float | None:
    """First tokens the answering engines gave over the window (None: none exports TTFT)."""
    counts = [n for d in deltas if (n := total(d.counts, "vllm:time_to_first_token_seconds_count"))]
    return sum(counts) if counts else None


def _engine_histogram(deltas: Sequence[Delta], name: str) -> Histogram | None:
    buckets = _sum_buckets(cumulative_buckets(d.counts, name) for d in deltas)
    return histogram(buckets) if buckets else None


def _sum_buckets(parts) -> list[tuple[float, float]]:
    acc: dict[float, float] = {}
    for buckets in parts:
        for bound, count in buckets or ():
            acc[bound] = acc.get(bound, 0.0) + count
    return sorted(acc.items())


def _gauge(gauges: Samples, name: str) -> float | None:
    return total(gauges, name)


def _max(values) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _instance(unit: Mapping[str, Any], t: TargetState) -> InstanceRow:
    running = _gauge(t.gauges, "vllm:num_requests_running") if t.up else None
    waiting = _gauge(t.gauges, "vllm:num_requests_waiting") if t.up else None
    return {
        "name": unit["name"],
        "role": unit.get("role"),
        "state": unit.get("state"),
        "url": unit.get("url"),
        "address": unit.get("address"),
        "node": unit.get("node"),
        "mode": unit.get("mode"),
        "up": t.up,
        "running": int(running or 0) if t.up else None,
        "waiting": int(waiting or 0) if t.up else None,
        "kv_cache_usage": _gauge(t.gauges, "vllm:kv_cache_usage_perc") if t.up else None,
        "loop_lag_s": _gauge(t.gauges, "pdctl_sim_loop_lag_seconds") if t.up else None,
    }


__all__ = [
    "MIN_ARRIVAL_GAPS",
    "WINDOW_SECONDS",
    "DeploymentInfo",
    "TargetState",
    "arrivals",
    "attainment",
    "build_frame",
    "engine_work",
    "gamma_shape",
    "headline",
    "interference",
    "kv_transfer",
    "multi_turn_share",
    "point",
    "requests",
    "tracked",
    "with_windows",
]
