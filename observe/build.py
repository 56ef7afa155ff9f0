"""Frames from scraped state: one deployment, one window, no I/O. The shell
(observe/scrape/observer.py) hands in what it scraped; everything here is arithmetic over it,
the proxy's counters read by observe/sections/traffic.py and the engines' by
observe/sections/engines.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from observe.frames import (
    WINDOW_SECONDS,
    Frame,
    Headline,
    InstanceRow,
    PdHappening,
    Point,
    SloShown,
    Window,
)
from observe.metrics.quantiles import histogram
from observe.metrics.samples import Samples, cumulative_buckets, total
from observe.metrics.windows import EMPTY, Delta
from observe.sections.engines import engine_histogram, engine_work, first_tokens, kv_transfer
from observe.sections.pd_check import NOT_CHECKED
from observe.sections.saved_share import prompt_saved_share
from observe.sections.traffic import (
    MIN_ARRIVAL_GAPS,
    arrivals,
    attainment,
    gamma_shape,
    interference,
    multi_turn_share,
    requests,
)

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
    # an attached deployment's TTFT parts (observe/attached/ttft.py)
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:prefix_cache_",
    "process_cpu_seconds",
)


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
    "is PD happening?" section the shell's check state gave (observe/sections/pd_check.py)."""
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
        "engine_ttft": engine_histogram(engine, "vllm:time_to_first_token_seconds"),
        "engine_itl": engine_histogram(engine, "vllm:inter_token_latency_seconds"),
        **requests(proxy.delta(window), first_tokens(engine)),
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


def marked_point(frame: Frame) -> Point:
    """A history point, marked when a change ran in its window (a chart can shade it)."""
    out = point(frame)
    evidence = frame.get("evidence")
    if evidence is not None:
        out["disturbed"] = evidence["disturbed"]
    return out


def with_windows(frame: Frame, frames: Mapping[str, Frame]) -> Frame:
    """`frame` plus the headline of every window (so a page can show all three at once)."""
    return {**frame, "windows": {w: headline(f) for w, f in frames.items()}}


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
