import pytest

from connector.measure.timing import SloTargets, judge, summarize


def test_summarize_streamed():
    t = summarize(
        arrival=10.0,
        end=10.5,
        token_times=[10.2, 10.3, 10.5],
        output_tokens=3,
        prefill_start=10.0,
        prefill_end=10.15,
    )
    assert t.ttft == pytest.approx(0.2)
    assert t.itls == pytest.approx([0.1, 0.2])
    assert t.tpot == pytest.approx(0.15)
    assert t.e2e == pytest.approx(0.5)
    assert t.prefill_leg == pytest.approx(0.15)
    assert t.transfer_first_decode == pytest.approx(0.05)


def test_summarize_unstreamed_has_ttft_equal_e2e():
    t = summarize(0.0, 2.0, [], output_tokens=10)
    assert t.ttft == t.e2e == 2.0 and t.itls == []
    assert t.tpot == 0.0
    assert t.prefill_leg is None


def test_one_token_has_no_tpot():
    assert summarize(0.0, 1.0, [1.0], 1).tpot is None


def gaps(*ms):
    t, times = 0.0, [0.0]
    for g in ms:
        t += g / 1000
        times.append(t)
    return summarize(0.0, times[-1], times, len(times))


@pytest.mark.parametrize(
    ("stat", "spike_ms", "spikes", "met"),
    [
        # one 500 ms spike in 100 gaps: mean 14.9 ms, p99 14.9 ms, max 500 ms
        ("mean", 500.0, 1, True),
        ("p99", 500.0, 1, True),
        ("max", 500.0, 1, False),
        # three 100 ms spikes: mean 12.7 ms, p99 100 ms
        ("mean", 100.0, 3, True),
        ("p99", 100.0, 3, False),
    ],
)
def test_itl_target_by_stat(stat, spike_ms, spikes, met):
    timing = gaps(*([10.0] * (100 - spikes) + [spike_ms] * spikes))
    assert judge(timing, SloTargets(itl_ms=20.0, itl_stat=stat))["itl"] is met


def test_judge_all_targets():
    timing = summarize(0.0, 1.0, [0.2, 0.25, 0.3], 3)
    met = judge(timing, SloTargets(ttft_ms=250, itl_ms=60, tpot_ms=300))
    assert met == {"ttft": True, "itl": True, "tpot": False, "all": False}
    assert judge(timing, SloTargets(ttft_ms=100)) == {"ttft": False, "all": False}


def test_target_equal_to_value_is_met():
    timing = summarize(0.0, 0.5, [0.5], 1)
    assert judge(timing, SloTargets(ttft_ms=500))["ttft"] is True


def test_no_itl_sample_meets_itl():
    assert judge(summarize(0.0, 1.0, [1.0], 1), SloTargets(itl_ms=1))["itl"] is True


def test_no_targets_means_all_met():
    assert judge(summarize(0.0, 1.0, [], 1), SloTargets()) == {"all": True}


def test_unknown_stat():
    with pytest.raises(ValueError):
        SloTargets(itl_stat="median")


def test_itl_figures_are_exactly_what_itl_statistic_computes() -> None:
    import random

    from domain.measures.slo import itl_statistic

    rng = random.Random(3)
    for n in (0, 1, 2, 7, 63, 200):
        gaps = [rng.expovariate(100.0) for _ in range(n)]
        stats = summarize(0.0, 1.0, [0.0, *gaps], n + 1).itl_stats
        itls = summarize(0.0, 1.0, [0.0, *gaps], n + 1).itls
        for stat in ("mean", "p99", "max"):
            assert stats[stat] == itl_statistic(itls, stat)  # bit for bit, not approx
