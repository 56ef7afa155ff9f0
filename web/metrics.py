"""/metrics for the control plane: a custom collector reading the stored state at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from web.store import Store


class StateCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        deployments, revisions, kinds = self.store.counts()
        yield GaugeMetricFamily("pdctl_deployments", "Deployments stored.", value=deployments)
        yield GaugeMetricFamily("pdctl_revisions", "Revisions stored, over all deployments.",
                                value=revisions)
        events = CounterMetricFamily("pdctl_events", "Events recorded, by kind.",
                                     labels=["kind"])
        for kind, count in sorted(kinds.items()):
            events.add_metric([kind], count)
        yield events


def build_registry(store: Store) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(StateCollector(store))
    return registry
