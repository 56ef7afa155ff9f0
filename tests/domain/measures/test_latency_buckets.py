"""The proxy's latency buckets: vLLM's all kept, finer in the SLO range, and fine enough that a
percentile follows a tail that moves inside one of vLLM's buckets."""

from __future__ import annotations

import itertools
import random

import pytest

from domain.measures.latency_buckets import (
    PROXY_ITL_BUCKETS,
    PROXY_TTFT_BUCKETS,
    r20_between,
    refined,
)
from domain.measures.vllm_metrics import ITL_BUCKETS, TTFT_BUCKETS, BucketHistogram
from observe.metrics.quantiles import quantile


@pytest.mark.parametrize(
    ("ours", "vllm", "low", "high"),
    [(PROXY_ITL_BUCKETS, ITL_BUCKETS, 0.002, 0.5), (PROXY_TTFT_BUCKETS, TTFT_BUCKETS, 0.005, 10)],
)
def test_every_vllm_boundary_is_kept_and_the_slo_range_is_12_to_14_percent_apart(
    ours, vllm, low, high
) -> None:
    assert set(vllm) <= set(ours)
    assert list(ours) == sorted(set(ours))
    inside = [b for b in ours if low <= b <= high]
    assert inside[0] == low and inside[-1] == high
    assert (
        max(b / a for a, b in itertools.pairwise(inside)) <= 1.15
    )  # R20's widest step, 1.4 to 1.6


def test_r20_values_are_short_decimals_at_every_decade() -> None:
    assert r20_between(0.001, 0.0025) == (
        0.001,
        0.00112,
        0.00125,
        0.0014,
        0.0016,
        0.0018,
        0.002,
        0.00224,
        0.0025,
    )
    assert r20_between(90, 110) == (90.0, 100.0)
    assert refined((0.075,), 0.07, 0.08) == (0.071, 0.075, 0.08)


@pytest.mark.parametrize(("low", "high"), [(0, 1), (-1, 1), (2, 1)])
def test_a_range_that_is_not_positive_and_ordered_is_refused(low, high) -> None:
    with pytest.raises(ValueError, match="low <= high"):
        r20_between(low, high)


def _p99(bounds, samples) -> float:
    h = BucketHistogram(bounds)
    for s in samples:
        h.observe(s)
    return quantile(0.99, [(float(b), n) for b, n in h.cumulative()])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("slow_tail", "fast_tail"), [(0.045, 0.033), (0.048, 0.04), (0.04, 0.027)])
def test_a_tail_that_moves_inside_one_vllm_bucket_moves_the_proxy_p99(
    seed, slow_tail, fast_tail
) -> None:
    """Gaps spread between 26 ms and the tail: vLLM's buckets read both p99s at ~49.8 ms (their
    25-50 ms bucket's end); the proxy's read each within one of their steps (14%) of the true
    one, and apart."""
    rng = random.Random(seed)
    slow = [rng.uniform(0.026, slow_tail) for _ in range(5000)]
    fast = [rng.uniform(0.026, fast_tail) for _ in range(5000)]
    assert _p99(ITL_BUCKETS, slow) == pytest.approx(_p99(ITL_BUCKETS, fast), rel=0.01)
    for samples in (slow, fast):
        truth = sorted(samples)[int(0.99 * len(samples))]
        assert _p99(PROXY_ITL_BUCKETS, samples) == pytest.approx(truth, rel=0.14)
    assert _p99(PROXY_ITL_BUCKETS, fast) < _p99(PROXY_ITL_BUCKETS, slow)
