"""The per-request ITL work done once (sorted gaps shared by the statistics, the histogram and
the spike count) gives exactly what the per-gap forms gave."""

from __future__ import annotations

import random
from itertools import pairwise

from connector.measure.interference import SPIKE_FACTOR, Interference
from connector.measure.metrics import _observe_gaps
from connector.measure.timing import summarize
from domain.measures.vllm_metrics import ITL_BUCKETS, BucketHistogram


def _token_times(rng: random.Random, n: int) -> list[float]:
    t, times = rng.random(), []
    for _ in range(n):
        # mostly steady gaps, some on a bucket bound exactly, a few spikes
        t += rng.choice([rng.uniform(0.001, 0.02), rng.choice(ITL_BUCKETS), rng.uniform(0.1, 2)])
        times.append(t)
    return times


def test_the_histogram_counts_each_gap_as_observe_does() -> None:
    rng = random.Random(21)
    batched, one_by_one = BucketHistogram(ITL_BUCKETS), BucketHistogram(ITL_BUCKETS)
    for _ in range(300):
        timing = summarize(0.0, 10.0, _token_times(rng, rng.randrange(0, 70)), 64)
        _observe_gaps(batched, timing.itls, timing.sorted_itls)
        for gap in timing.itls:
            one_by_one.observe(gap)
    assert batched.counts == one_by_one.counts
    assert batched.count == one_by_one.count and batched.sum == one_by_one.sum


def _spikes_per_gap(prefills: list[float], times: list[float], slack: float) -> tuple[int, int]:
    gaps = [b - a for a, b in pairwise(times)]
    if len(gaps) < 3:
        return 0, 0
    threshold = SPIKE_FACTOR * sorted(gaps)[len(gaps) // 2]
    spikes = lined = 0
    for start, end in pairwise(times):
        if end - start > threshold:
            spikes += 1
            lined += any(start < p <= end + slack for p in prefills)
    return spikes, lined


def test_spikes_from_the_sorted_gaps_match_the_per_gap_count() -> None:
    rng = random.Random(18)
    tracker = Interference()
    prefills = sorted(rng.uniform(0, 40) for _ in range(200))
    for at in prefills:
        tracker.prefill_done("e", at)
    for _ in range(300):
        times = _token_times(rng, rng.randrange(0, 70))
        timing = summarize(0.0, 10.0, times, 64)
        expected = _spikes_per_gap(prefills, times, tracker.slack_s)
        assert tracker.spikes("e", times, timing.sorted_itls) == expected
        assert tracker.spikes("e", times) == expected
