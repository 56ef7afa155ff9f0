"""/metrics for the control plane: a custom collector reading the stored state at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from state.store import Store


class StateCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        deployments, revisions, kinds = self.store.counts()
        yield GaugeMetricFamily("pdctl_deployments", "Deployments stored.", value=deployments)
        yield GaugeMetricFamily(
            "pdctl_revisions", "Revisions stored, over all deployments.", value=revisions
        )
        events = CounterMetricFamily("pdctl_events", "Events recorded, by kind.", labels=["kind"])
        for kind, count in sorted(kinds.items()):
            events.add_metric([kind], count)
        yield events


def build_registry(store: Store) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(StateCollector(store))
    return registry


class LiveCollector(Collector):
    """What runs now (the controller's instances by state, mode switches) and what observe/
    measures (per deployment, over its 1-minute window), at scrape time."""

    def __init__(self, controller: Any, observer: Any | None) -> None:
        self.controller, self.observer = controller, observer

    def collect(self) -> Iterator[Metric]:
        supervised = self.controller.supervisor.deployments
        yield GaugeMetricFamily(
            "pdctl_deployments_supervised",
            "Deployments the controller supervises.",
            value=len(supervised),
        )
        units = GaugeMetricFamily(
            "pdctl_instances",
            "Supervised processes by state.",
            labels=["deployment", "role", "state"],
        )
        restarts = CounterMetricFamily(
            "pdctl_instance_restarts",
            "Restarts of supervised processes.",
            labels=["deployment", "instance"],
        )
        for name in sorted(supervised):
            counts: dict[tuple[str, str], int] = {}
            for unit in self.controller.status(name):
                key = (unit["role"], unit["state"])
                counts[key] = counts.get(key, 0) + 1
                restarts.add_metric([name, unit["name"]], unit.get("restarts") or 0)
            for (role, state), n in sorted(counts.items()):
                units.add_metric([name, role, state], n)
        yield units
        yield restarts
        yield from self._switches()
        if self.observer is not None:
            yield from self._aggregates(self.observer)

    def _switches(self) -> Iterator[Metric]:
        switches = CounterMetricFamily(
            "pdctl_switches", "Mode switches begun, by outcome.", labels=["deployment", "state"]
        )
        counts: dict[tuple[str, str], int] = {}
        for name in self.controller.supervisor.deployments:
            for record in self.controller.switches(name):
                key = (record.deployment, record.state)
                counts[key] = counts.get(key, 0) + 1
        for (deployment, state), n in sorted(counts.items()):
            switches.add_metric([deployment, state], n)
        yield switches

    def _aggregates(self, observer: Any) -> Iterator[Metric]:
        yield from frame_families(observer.latest)
        yield from pd_families(observer.latest)
        runner = getattr(observer, "canary", None)  # observe/canary/runner.py
        yield from canary_families(runner.states if runner is not None else {})


def frame_families(latest: dict) -> Iterator[Metric]:
    """The SLO figures of each deployment's 1-minute frame (observe/frames.py), the rejected
    share beside attainment, KV throughput and whether each process answered its scrape."""
    families = {
        "slo_attainment": GaugeMetricFamily(
            "pdctl_slo_attainment",
            "Share of the requests the proxy ended meeting every SLO target, a rejected or "
            "failed one meeting none (last minute; a client's invalid request apart).",
            labels=["deployment"],
        ),
        "request_goodput": GaugeMetricFamily(
            "pdctl_request_goodput",
            "Requests meeting every target per second (last minute).",
            labels=["deployment"],
        ),
        "request_rate": GaugeMetricFamily(
            "pdctl_request_rate",
            "Requests per second the proxy ended, rejected ones too (last minute).",
            labels=["deployment"],
        ),
        "rejected_share": GaugeMetricFamily(
            "pdctl_request_rejected_share",
            "Of those requests, the share the proxy rejected (503): nothing could serve "
            "them (last minute).",
            labels=["deployment"],
        ),
    }
    rejected = GaugeMetricFamily(
        "pdctl_request_rejected_rate",
        "Requests the proxy rejected (503) per second (last minute).",
        labels=["deployment"],
    )
    kv = GaugeMetricFamily(
        "pdctl_kv_transfer_bytes_per_second",
        "KV bytes moved between instances per second (last minute); source nixl or moriio "
        "(the engine's own), or derived (when it exports none).",
        labels=["deployment", "source"],
    )
    up = GaugeMetricFamily(
        "pdctl_target_up",
        "1 when the last scrape of a process answered.",
        labels=["deployment", "instance"],
    )
    for name, frames in sorted(latest.items()):
        frame = frames.get("1m")
        if frame is None:
            continue
        for key, family in families.items():
            if (value := frame.get(key)) is not None:
                family.add_metric([name], value)
        rejected.add_metric([name], frame["outcomes"]["rejected"])
        if frame["kv"]["bytes_per_s"] is not None:
            kv.add_metric([name, frame["kv"]["source"]], frame["kv"]["bytes_per_s"])
        up.add_metric([name, "proxy"], 1 if frame["proxy"]["up"] else 0)
        for inst in frame["instances"]:
            up.add_metric([name, inst["name"]], 1 if inst["up"] else 0)
    yield from families.values()
    yield rejected
    yield kv
    yield up


def pd_families(latest: dict) -> Iterator[Metric]:
    """ "Is PD happening?" per decode (observe/sections/pd_check.py): the share of its prompt tokens
    that arrived by KV transfer over 10 s, whether it recomputes, and since when."""
    labels = ["deployment", "instance"]
    share = GaugeMetricFamily(
        "pdctl_pd_transfer_share",
        "Share of a decode's prompt tokens that arrived by KV transfer (last 10 s; cache hits "
        "apart); absent while too little traffic flows to judge.",
        labels=labels,
    )
    recomputing = GaugeMetricFamily(
        "pdctl_pd_recomputing",
        "1 while a decode recomputes its prompts (PD is not happening there), else 0.",
        labels=labels,
    )
    since = GaugeMetricFamily(
        "pdctl_pd_recomputing_since_seconds",
        "Epoch seconds a decode began recomputing (only while it does).",
        labels=labels,
    )
    for name, frames in sorted(latest.items()):
        frame = frames.get("1m")
        if frame is None or not frame["pd"]["applies"]:
            continue
        for row in frame["pd"]["decodes"]:
            key = [name, row["instance"]]
            if row["share"] is not None:
                share.add_metric(key, row["share"])
            recomputing.add_metric(key, 1 if row["status"] == "recomputing" else 0)
            if row["since"] is not None:
                since.add_metric(key, row["since"])
    yield share
    yield recomputing
    yield since


def canary_families(states: dict) -> Iterator[Metric]:
    """The correctness canary (observe/canary/state.py): checks by result, whether it fails now."""
    checks = CounterMetricFamily(
        "pdctl_canary_checks",
        "Correctness canaries judged: ok, mismatch (the answer through the hand-off differs "
        "from the model's colocated answer) or error (not judged: no answer).",
        labels=["deployment", "result"],
    )
    failing = GaugeMetricFamily(
        "pdctl_canary_failing",
        "Pairs whose last canary answer was wrong (0: none).",
        labels=["deployment"],
    )
    last = GaugeMetricFamily(
        "pdctl_canary_last_check_timestamp_seconds",
        "Epoch seconds of the last canary verdict.",
        labels=["deployment"],
    )
    for name, state in sorted(states.items()):
        for result, n in sorted(state.counts.items()):
            checks.add_metric([name, result], n)
        failing.add_metric([name], len(state.failing))
        if state.last is not None:
            last.add_metric([name], state.last.at)
    yield checks
    yield failing
    yield last
