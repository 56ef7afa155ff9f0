"""Percentiles by linear interpolation within buckets, as histogram_quantile() computes them."""

from __future__ import annotations

import pytest

from observe.metrics.quantiles import histogram, quantile

INF = float("inf")


def test_interpolates_within_the_bucket_holding_the_rank() -> None:
    buckets = [(0.1, 0.0), (0.2, 10.0), (0.5, 10.0), (INF, 10.0)]
    assert quantile(0.5, buckets) == pytest.approx(0.15)
    assert quantile(0.9, buckets) == pytest.approx(0.19)


def test_first_bucket_interpolates_from_zero() -> None:
    assert quantile(0.5, [(1.0, 4.0), (INF, 4.0)]) == pytest.approx(0.5)


def test_rank_in_the_inf_bucket_answers_the_highest_finite_bound() -> None:
    assert quantile(0.99, [(0.1, 1.0), (1.0, 1.0), (INF, 100.0)]) == 1.0


def test_empty_histogram_has_no_percentiles() -> None:
    assert quantile(0.5, [(0.1, 0.0), (INF, 0.0)]) is None
    h = histogram(None)
    assert h == {"buckets": [], "count": 0.0, "p50": None, "p90": None, "p99": None}


def test_frame_histogram_is_per_bucket_with_inf_as_none() -> None:
    h = histogram([(0.1, 2.0), (0.2, 5.0), (INF, 6.0)])
    assert h["buckets"] == [[0.1, 2.0], [0.2, 3.0], [None, 1.0]]
    assert h["count"] == 6.0
    assert h["p50"] == pytest.approx(0.1 + 0.1 * (3 - 2) / 3)
    assert h["p99"] == 0.2


def test_non_monotonic_counts_are_forced_up_as_prometheus_does() -> None:
    h = histogram([(0.1, 5.0), (0.2, 4.0), (INF, 5.0)])
    assert [c for _, c in h["buckets"]] == [5.0, 0.0, 0.0]
