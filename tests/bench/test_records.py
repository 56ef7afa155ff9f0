"""Per-request SLO judgement of `pdctl bench` records (the judge itself: tests/domain)."""

from __future__ import annotations

import pytest

from bench.records import RequestRecord, SloTargets, itl_statistic, judge


def _record(ttft: float = 0.1, itl: list[float] | None = None, ok: bool = True) -> RequestRecord:
    gaps = [0.01, 0.01, 0.01, 0.2] if itl is None else itl
    return RequestRecord(
        ok=ok,
        ttft=ttft,
        itl=gaps,
        output_tokens=len(gaps) + 1,
        e2el=ttft + sum(gaps),
    )


def test_itl_statistics() -> None:
    gaps = [0.01, 0.01, 0.01, 0.2]
    assert itl_statistic(gaps, "mean") == pytest.approx(0.0575)
    assert itl_statistic(gaps, "max") == 0.2
    assert itl_statistic(gaps, "p99") == pytest.approx(0.01 + 0.19 * 0.97)
    assert itl_statistic([], "p99") is None


@pytest.mark.parametrize(("stat", "met"), [("mean", True), ("p99", False), ("max", False)])
def test_itl_target_is_judged_on_the_chosen_statistic(stat: str, met: bool) -> None:
    verdict = judge(_record(), SloTargets(itl_ms=100, itl_stat=stat))
    assert verdict.itl is met
    assert verdict.met is met


def test_ttft_target_is_inclusive() -> None:
    assert judge(_record(ttft=0.5), SloTargets(ttft_ms=500)).ttft
    assert not judge(_record(ttft=0.501), SloTargets(ttft_ms=500)).ttft


def test_tpot_target() -> None:
    record = _record()  # tpot = 0.23 / 4 = 57.5 ms
    assert judge(record, SloTargets(tpot_ms=60)).tpot
    assert not judge(record, SloTargets(tpot_ms=50)).tpot


def test_attained_only_when_every_given_target_is_met() -> None:
    targets = SloTargets(ttft_ms=200, itl_ms=250, tpot_ms=100, itl_stat="max")
    assert judge(_record(ttft=0.1), targets).met
    assert not judge(_record(ttft=0.3), targets).met


def test_no_targets_means_every_success_attains() -> None:
    assert judge(_record(), SloTargets()).met


def test_failed_request_never_attains() -> None:
    verdict = judge(_record(ok=False), SloTargets())
    assert not (verdict.ttft or verdict.itl or verdict.tpot or verdict.met)


def test_single_token_has_no_gaps_to_break_itl_or_tpot() -> None:
    record = RequestRecord(ok=True, ttft=0.05, itl=[], output_tokens=1, e2el=0.05)
    assert record.tpot is None
    assert judge(record, SloTargets(itl_ms=1, tpot_ms=1)).met


def test_unknown_itl_stat_is_rejected() -> None:
    with pytest.raises(ValueError, match="itl_stat"):
        SloTargets(itl_stat="p50")
