"""Prometheus families in the shapes vLLM's /metrics writes them: a one-sample gauge, a family
with a sample per value of one extra label, and a histogram with its `*_created` gauge.
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from domain.measures.vllm_metrics import BucketHistogram


def gauge(name: str, doc: str, names: list[str], values: list[str], value: float) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=names)
    family.add_metric(values, value)
    return family


def by_label(
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


def histogram(
    name: str,
    hist: BucketHistogram,
    names: list[str],
    values: list[str],
    created: float,
    doc: str | None = None,
) -> Metric:
    doc = doc or name.split(":")[-1].replace("_", " ")
    family = HistogramMetricFamily(name, doc, labels=names)
    family.add_metric(values, hist.cumulative(), hist.sum)
    # HistogramMetricFamily takes no `created`; the text format shows it as a *_created gauge.
    family.samples.append(Sample(name + "_created", dict(zip(names, values, strict=True)), created))
    return family
