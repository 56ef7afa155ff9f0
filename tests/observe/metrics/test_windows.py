"""Windows over cumulative counters: increases, rates, and counter resets mid-window."""

from __future__ import annotations

import pytest

from observe.metrics.samples import parse, total
from observe.metrics.windows import Snapshots, advance
from tests.observe.series import proxy_text

OK = ("pdctl_proxy_requests_total", (("outcome", "ok"),))


def replay(series: list[tuple[float, str]]) -> Snapshots:
    """Scrape each (ts, text) in turn into one target's snapshots."""
    track, snaps = None, Snapshots()
    for ts, text in series:
        track = advance(track, parse(text).counters)
        snaps.add(ts, track.totals)
    return snaps


def test_increase_over_each_window() -> None:
    snaps = replay([(float(t), proxy_text(ok=10 * t)) for t in range(0, 121)])
    assert snaps.delta(10).counts[OK] == pytest.approx(100)
    assert snaps.delta(10).span == pytest.approx(10)
    assert snaps.delta(60).rate(snaps.delta(60).counts[OK]) == pytest.approx(10)
    five = snaps.delta(300)  # only 120 s of history: the whole of it
    assert five.span == pytest.approx(120) and five.counts[OK] == pytest.approx(1200)


def test_a_reset_mid_window_counts_the_new_value_as_the_increase_since() -> None:
    # 5 ok a second for 30 s, the proxy restarts at t=30 (counts from 0 again), then 5 a s.
    series = [(float(t), proxy_text(ok=5 * t, met_all=4 * t)) for t in range(0, 30)]
    series += [(float(t), proxy_text(ok=5 * (t - 29), met_all=4 * (t - 29))) for t in range(30, 41)]
    snaps = replay(series)
    window = snaps.delta(20)  # t=20..40: 9 s before the reset and 11 after, all 5/s
    assert window.counts[OK] == pytest.approx(100)
    assert window.rate(window.counts[OK]) == pytest.approx(5)
    met = window.counts[("pdctl_proxy_slo_met_total", (("target", "all"),))]
    assert met / window.counts[OK] == pytest.approx(0.8)


def test_a_reset_is_decided_per_target_so_buckets_stay_consistent() -> None:
    # Before: 50 in the 0.1 s bucket. After the restart: 60 in the 0.1 s bucket (more than
    # before: alone it would not look like a reset) and 1 in the 1 s bucket.
    series = [(0.0, proxy_text({0.1: 50}, ok=50)), (1.0, proxy_text({0.1: 60, 1.0: 1}, ok=0))]
    snaps = replay(series)
    counts = snaps.delta(10).counts
    assert total(counts, "pdctl_proxy_ttft_seconds_count") == 61
    assert counts[("pdctl_proxy_ttft_seconds_bucket", (("le", "0.1"),))] == 60


def test_no_increase_on_first_sight_and_new_series_count_from_zero() -> None:
    snaps = replay([(0.0, proxy_text(ok=1000))])
    assert snaps.delta(10).counts[OK] == 0
    invalid = ("pdctl_proxy_requests_total", (("outcome", "invalid"),))
    first = advance(None, {OK: 1000.0})
    second = advance(first, {OK: 1000.0, invalid: 3.0})
    assert second.totals[invalid] == 3 and second.totals[OK] == 1000 and second.resets == 0


def test_snapshots_thin_out_beyond_the_fine_span_and_expire() -> None:
    snaps = Snapshots(keep_s=310, fine_s=12, step_s=5)
    for t in range(0, 1000):
        snaps.add(float(t), {OK: float(t)})
    assert snaps.at(990.0)[0] == 990.0  # fine: every second
    assert 935.0 <= snaps.at(939.0)[0] <= 939.0  # coarse: within a step
    assert snaps.at(0.0)[0] >= 1000 - 311  # older than keep_s is gone
    assert snaps.delta(300).span == pytest.approx(300, abs=5)
