"""The one percentile, ITL statistic and judge of "met", and the proof that the proxy,
`pdctl bench` and the planner, each feeding it their own records, agree on every request."""

from __future__ import annotations

import itertools
import random

import pytest

from bench.records import RequestRecord
from bench.records import judge as bench_judge
from connector.measure.timing import judge as proxy_judge
from connector.measure.timing import summarize
from domain.measures.slo import (
    DEFAULT_ITL_STAT,
    ItlStat,
    SloTargets,
    itl_statistic,
    judge,
    max_goodput_rate,
    percentile,
)
from simulator.plan.cluster import RequestResult
from simulator.plan.planner import judge as planner_judge


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),
        ([1, 2, 3, 4], 99, 3.97),
        ([1, 2, 3, 4], 0, 1),
        ([1, 2, 3, 4], 100, 4),
        ([15, 20, 35, 40, 50], 40, 29.0),
        ([3, 1, 2], 50, 2),
        ([7], 99, 7),
        (list(range(1, 101)), 99, 99.01),
    ],
)
def test_percentile_interpolates_linearly_like_numpy(values, p, expected):
    assert percentile(values, p) == pytest.approx(expected)


def test_no_values_have_no_percentile():
    assert percentile([], 50) is None
    assert percentile([1.0], 50, weights=[0]) is None


def test_weights_count_each_value_that_many_times():
    rng = random.Random(7)
    for _ in range(500):
        values = [rng.choice([0.01, 0.02, 0.15, 0.3]) for _ in range(rng.randrange(1, 7))]
        weights = [rng.randrange(0, 6) for _ in values]
        expanded = [v for v, w in zip(values, weights, strict=True) for _ in range(w)]
        for q in (0, 10, 50, 99, 100):
            assert percentile(values, q, weights) == percentile(expanded, q)


def test_itl_statistics():
    gaps = [0.01, 0.01, 0.01, 0.2]
    assert itl_statistic(gaps, "mean") == pytest.approx(0.0575)
    assert itl_statistic(gaps, "max") == 0.2
    assert itl_statistic(gaps, "p99") == pytest.approx(0.01 + 0.19 * 0.97)
    assert itl_statistic([], "p99") is None
    with pytest.raises(ValueError, match="expected one of mean, p99, max"):
        itl_statistic(gaps, "median")


def test_the_default_statistic_is_p99_everywhere():
    assert SloTargets().itl_stat is ItlStat.P99 is DEFAULT_ITL_STAT
    from connector.settings import ProxySettings
    from simulator.plan.planner import PLAN_SLO

    assert ProxySettings(port=8000).slo.itl_stat is ItlStat.P99
    assert PLAN_SLO.itl_stat is ItlStat.P99


def test_judge_is_inclusive_and_fails_unanswered_requests():
    targets = SloTargets(ttft_ms=500, itl_ms=50)
    assert judge(targets, 0.5, 0.05).met
    assert not judge(targets, 0.501, 0.01).met
    assert not judge(targets, None, None).met
    assert not judge(targets, 0.1, 0.01, ok=False).met
    assert judge(targets, 0.1, None).met  # one token: no gap to break the ITL target


def test_max_goodput_rate_is_the_highest_rate_at_or_above_the_share():
    points = [(1.0, 1.0), (2.0, 0.95), (3.0, 0.85), (4.0, 0.91)]
    assert max_goodput_rate(points, 0.9) == 4.0
    assert max_goodput_rate(points, 0.99) == 1.0
    assert max_goodput_rate(points, 1.01) is None


def _recorded_requests(n: int = 300) -> list[tuple[float, list[float]]]:
    """(TTFT, token gaps) of requests like a colocated run's: some with prefill spikes. Binary
    fractions of a second, so token times add up exactly and every path sees the same gaps;
    some sit right at the targets (1 s, 50 ms = 0.05 is not one; 1/16 s, 1/32 s are near)."""
    rng = random.Random(2026)
    out = []
    for _ in range(n):
        ttft = rng.choice([0.25, 0.5, 1 - 2**-10, 1.0, 1 + 2**-10, 1.5])
        gaps = [rng.choice([2**-6, 2**-5, 3 * 2**-6]) for _ in range(rng.randrange(0, 80))]
        for _ in range(rng.randrange(0, 3)):
            if gaps:
                gaps[rng.randrange(len(gaps))] = rng.choice([2**-4, 2**-3])
        out.append((ttft, gaps))
    return out


@pytest.mark.parametrize("stat", ["mean", "p99", "max"])
def test_the_proxy_bench_and_planner_agree_on_every_request(stat):
    targets = SloTargets(ttft_ms=1000.0, itl_ms=50.0, itl_stat=stat)
    met = {"proxy": [], "bench": [], "planner": []}
    for ttft, gaps in _recorded_requests():
        times = list(itertools.accumulate([ttft, *gaps]))
        timing = summarize(0.0, times[-1], times, len(times))
        met["proxy"].append(proxy_judge(timing, targets)["all"])
        record = RequestRecord(
            ok=True, ttft=ttft, itl=gaps, output_tokens=len(times), e2el=times[-1]
        )
        met["bench"].append(bench_judge(record, targets).met)
        # the planner keeps runs of equal gaps
        runs = [(g, len(list(group))) for g, group in itertools.groupby(gaps)]
        result = RequestResult("r", 0.0, ttft, runs, times[-1], len(times))
        met["planner"].append(planner_judge([result], targets)[2] == 1)
    assert met["proxy"] == met["bench"] == met["planner"]
    assert 0 < sum(met["proxy"]) < len(met["proxy"])  # the set has both verdicts
