"""A /metrics text as samples: cumulative ones (counters, histogram buckets, counts and sums)
apart from gauges, keyed by sample name and sorted labels, and sums over matching labels."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from observe.metrics import text_format
from observe.metrics.text_format import Family, Labels

Key = tuple[str, Labels]
Samples = Mapping[Key, float]

_CUMULATIVE_TYPES = ("counter", "histogram")
_CUMULATIVE_SUFFIXES = ("_total", "_bucket", "_count", "_sum")


@dataclass(frozen=True, slots=True)
class Scrape:
    counters: dict[Key, float]  # only ever grow, until the process restarts
    gauges: dict[Key, float]


def parse(text: str, keep: Callable[[str], bool] | None = None) -> Scrape:
    """Parse a Prometheus text exposition; `keep(family_name)` filters families early (the
    windows keep a few hundred series a target, not vLLM's thousands). vLLM's and the
    stand-in's pages take the fast reader (text_format.py); any other page prometheus_client's
    parser, with the same result and the same errors."""
    try:
        try:
            families: Iterable[Family] = text_format.read(text)
        except text_format.Unsupported:
            families = _prometheus_client_families(text)
        return _scrape(families, keep)
    except ArithmeticError as exc:  # a value too large for a float: unreadable, like the rest
        raise ValueError(f"a sample value out of range: {exc}") from None


def parse_by_prometheus_client(text: str, keep: Callable[[str], bool] | None = None) -> Scrape:
    """`parse` through prometheus_client's parser alone (the reference the benchmark times)."""
    return _scrape(_prometheus_client_families(text), keep)


def _prometheus_client_families(text: str) -> Iterator[Family]:
    for family in text_string_to_metric_families(text):
        labelled = [(s.name, tuple(sorted(s.labels.items())), s.value) for s in family.samples]
        yield family.name, family.type, labelled


def _scrape(families: Iterable[Family], keep: Callable[[str], bool] | None) -> Scrape:
    counters: dict[Key, float] = {}
    gauges: dict[Key, float] = {}
    for name, typ, samples in families:
        if keep is not None and not keep(name):
            continue
        cumulative = typ in _CUMULATIVE_TYPES
        for sample, labels, value in samples:
            if math.isnan(value):
                continue
            if cumulative and sample.endswith(_CUMULATIVE_SUFFIXES):
                counters[(sample, labels)] = value
            elif not cumulative and typ != "info":
                gauges[(sample, labels)] = value
    return Scrape(counters, gauges)


def _matches(labels: Labels, want: Mapping[str, str]) -> bool:
    if not want:
        return True
    have = dict(labels)
    return all(have.get(k) == v for k, v in want.items())


def total(samples: Samples, name: str, **labels: str) -> float | None:
    """Sum of the samples named `name` whose labels include `labels`; None when none is."""
    found, acc = False, 0.0
    for (sample, have), value in samples.items():
        if sample == name and _matches(have, labels):
            found, acc = True, acc + value
    return acc if found else None


def cumulative_buckets(
    samples: Samples, histogram: str, **labels: str
) -> list[tuple[float, float]] | None:
    """`histogram`'s buckets as (upper bound, cumulative count), summed over every other label
    (instances, engines), sorted with +Inf last; None when the histogram is absent."""
    name = histogram + "_bucket"
    acc: dict[float, float] = {}
    for (sample, have), value in samples.items():
        if sample != name:
            continue
        rest = dict(have)
        le = rest.pop("le", None)
        if le is None or not _matches(have, labels):
            continue
        bound = float(le)
        acc[bound] = acc.get(bound, 0.0) + value
    return sorted(acc.items()) if acc else None


def family_present(samples: Samples, prefix: str) -> bool:
    return any(sample.startswith(prefix) for sample, _ in samples)
