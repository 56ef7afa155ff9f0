import pytest

from simulator.engine.request import TokenTimeline, gap_stat


def test_steady_tokens_collapse_into_one_run():
    tl = TokenTimeline()
    for i in range(1000):
        tl.add(1.0 + 0.03 * i)
    assert len(tl.runs) == 1 and tl.count == 1000
    assert gap_stat(tl.gaps(), "mean") == pytest.approx(0.03)


def test_a_stall_starts_a_new_run_and_shows_in_p99_and_max():
    tl = TokenTimeline()
    t = 0.0
    for i in range(200):
        t += 0.15 if i == 100 else 0.03
        tl.add(t)
    assert len(tl.runs) == 2
    gaps = tl.gaps()
    assert gap_stat(gaps, "max") == pytest.approx(0.15)
    assert gap_stat(gaps, "p50") == pytest.approx(0.03)
    assert gap_stat(gaps, "p99") == pytest.approx(0.03)  # 1 of 199 gaps is under the 1%
    assert len(tl.times()) == 200


def test_runs_added_in_bulk_merge_with_steady_neighbours():
    tl = TokenTimeline()
    tl.add(0.0)
    tl.add_run(0.1, 1.0, 10)
    assert len(tl.runs) == 1 and tl.count == 11


def test_no_gaps_no_statistic_and_unknown_statistic_refused():
    assert gap_stat([], "mean") is None
    with pytest.raises(ValueError, match="median"):
        gap_stat([(0.1, 1)], "median")
