"""Windowed histograms and their percentiles, interpolated linearly within a bucket as
Prometheus' histogram_quantile() does."""

from __future__ import annotations

import math
from typing import Literal

from observe.frames import Histogram

Quantile = Literal["p50", "p90", "p99"]  # a Histogram key
QUANTILES: tuple[tuple[Quantile, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def monotonic(cumulative: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Cumulative counts forced non-decreasing (as histogram_quantile does with odd scrapes)."""
    out, top = [], 0.0
    for bound, count in cumulative:
        top = max(top, count)
        out.append((bound, top))
    return out


def quantile(q: float, cumulative: list[tuple[float, float]]) -> float | None:
    """The q-quantile of a histogram given as sorted (upper bound, cumulative count), +Inf
    last. None when it holds nothing. A rank in the +Inf bucket answers the highest finite
    bound; the first bucket interpolates from 0 (from its bound if that is not positive)."""
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    buckets = monotonic(cumulative)
    rank = q * buckets[-1][1]
    for i, (upper, count) in enumerate(buckets):
        if count < rank:
            continue
        if math.isinf(upper):
            return buckets[i - 1][0] if i > 0 else None
        lower, below = (buckets[i - 1][0], buckets[i - 1][1]) if i > 0 else (0.0, 0.0)
        if i == 0 and upper <= 0:
            return upper
        inside = count - below
        if inside <= 0:
            return upper
        return lower + (upper - lower) * (rank - below) / inside
    return None


def histogram(cumulative: list[tuple[float, float]] | None) -> Histogram:
    """A frame's Histogram: per-bucket counts (not cumulative; the +Inf bound as None, which
    JSON can carry) with count and p50/p90/p99."""
    cumulative = monotonic(cumulative or [])
    buckets: list[list[float | None]] = []
    below = 0.0
    for bound, count in cumulative:
        buckets.append([None if math.isinf(bound) else bound, count - below])
        below = count
    count = cumulative[-1][1] if cumulative else 0.0
    h: Histogram = {"buckets": buckets, "count": count, "p50": None, "p90": None, "p99": None}
    for key, q in QUANTILES:
        h[key] = quantile(q, cumulative)
    return h
