"""The result document: vLLM's field names, SLO attainment, loop lag and sweeps."""

from __future__ import annotations

import math

import pytest

from bench.records import RequestRecord, SloTargets
from bench.summary import loop_lag, max_goodput_rate, summarize, sweep_result

VLLM_FIELDS = [
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
] + [
    f"{stat}_{metric}_ms"
    for metric in ("ttft", "tpot", "itl", "e2el")
    for stat in ("mean", "median", "std", "p99")
]


def _records() -> list[RequestRecord]:
    fast = RequestRecord(
        ok=True, prompt_tokens=10, output_tokens=3, ttft=0.1, itl=[0.02, 0.02], e2el=0.14
    )
    slow_first = RequestRecord(
        ok=True, prompt_tokens=20, output_tokens=3, ttft=0.9, itl=[0.02, 0.04], e2el=0.96
    )
    jittery = RequestRecord(
        ok=True, prompt_tokens=30, output_tokens=3, ttft=0.2, itl=[0.02, 0.3], e2el=0.52
    )
    failed = RequestRecord(ok=False, error="HTTP 500", prompt_tokens=40)
    return [fast, slow_first, jittery, failed]


def test_summary_has_vllm_fields_and_ours() -> None:
    result = summarize(_records(), 2.0, SloTargets(ttft_ms=500, itl_ms=50, itl_stat="max"))
    for name in VLLM_FIELDS:
        assert name in result, name
    for name in ("slo_attainment", "itl_slo_stat", "met_ttft", "met_itl", "met_both"):
        assert name in result, name


def test_counts_and_throughputs_use_successful_requests() -> None:
    result = summarize(_records(), 2.0, SloTargets(ttft_ms=500, itl_ms=50, itl_stat="max"))
    assert result["completed"] == 3
    assert result["failed"] == 1
    assert result["total_input_tokens"] == 60
    assert result["total_output_tokens"] == 9
    assert result["request_throughput"] == pytest.approx(1.5)
    assert result["output_throughput"] == pytest.approx(4.5)
    assert result["total_token_throughput"] == pytest.approx(34.5)


def test_latency_fields_in_ms() -> None:
    result = summarize(_records(), 2.0, SloTargets())
    assert result["mean_ttft_ms"] == pytest.approx(400)
    assert result["median_ttft_ms"] == pytest.approx(200)
    assert result["p99_ttft_ms"] == pytest.approx(200 + 700 * 0.98)
    assert result["std_ttft_ms"] == pytest.approx(355.90, abs=0.01)
    # ITL pools every gap of every successful request
    assert result["median_itl_ms"] == pytest.approx(20)
    assert result["mean_itl_ms"] == pytest.approx(70)
    # TPOT = (e2el - ttft) / (output - 1)
    assert result["mean_tpot_ms"] == pytest.approx((20 + 30 + 160) / 3)
    assert result["mean_e2el_ms"] == pytest.approx((140 + 960 + 520) / 3)


def test_slo_attainment_and_goodput_count_requests_meeting_every_target() -> None:
    result = summarize(_records(), 2.0, SloTargets(ttft_ms=500, itl_ms=50, itl_stat="max"))
    assert result["met_ttft"] == 2
    assert result["met_itl"] == 2
    assert result["met_tpot"] is None
    assert result["met_both"] == 1
    assert result["slo_attainment"] == pytest.approx(0.25)  # failed requests count against
    assert result["request_goodput"] == pytest.approx(0.5)
    assert result["itl_slo_stat"] == "max"


def test_rejected_requests_fail_the_slo_and_are_counted_apart() -> None:
    # An outage as a client sees it: 1 met, 1 timed out, 2 answered 503 and 1 429.
    refused = [
        RequestRecord(ok=False, error="HTTP 503: no instance", status=503),
        RequestRecord(ok=False, error="HTTP 503: no instance", status=503),
        RequestRecord(ok=False, error="HTTP 429", status=429),
    ]
    timed_out = RequestRecord(ok=False, error="timed out after 5 s")
    records = [_records()[0], timed_out, *refused]
    result = summarize(records, 1.0, SloTargets(ttft_ms=500, itl_ms=50, itl_stat="max"))
    assert result["slo_attainment"] == pytest.approx(1 / 5)  # as vllm bench serve: all count
    assert result["failed"] == 4 and result["rejected"] == 3
    assert result["rejected_share"] == pytest.approx(3 / 5)
    assert summarize(_records(), 1.0, SloTargets())["rejected"] == 0  # a 500 is not refused


@pytest.mark.parametrize(("stat", "met_itl"), [("mean", 3), ("p99", 2), ("max", 2)])
def test_itl_stat_changes_who_meets_itl(stat: str, met_itl: int) -> None:
    result = summarize(_records(), 1.0, SloTargets(itl_ms=200, itl_stat=stat))
    assert result["met_itl"] == met_itl


def test_empty_run_reports_zeros_not_errors() -> None:
    result = summarize([], 0.0, SloTargets())
    assert result["completed"] == 0
    assert result["request_throughput"] == 0.0
    assert result["p99_itl_ms"] == 0.0
    assert result["slo_attainment"] == 0.0
    assert result["rejected"] == 0 and result["rejected_share"] == 0.0


def test_loop_lag_in_ms_and_flag_above_ten_percent_of_itl() -> None:
    lag = loop_lag([0.0] * 98 + [0.001, 0.006])
    assert lag.max_ms == pytest.approx(6.0)
    assert lag.p99_ms == pytest.approx(1.05)
    assert lag.samples == 100
    assert lag.exceeds(50.0)
    assert not lag.exceeds(60.0)
    assert not lag.exceeds(None)


def test_max_goodput_rate_is_the_highest_rate_meeting_the_share() -> None:
    points = [(1.0, 1.0), (2.0, 0.95), (4.0, 0.85), (8.0, 0.2)]
    assert max_goodput_rate(points, 0.9) == 2.0
    assert max_goodput_rate(points, 0.8) == 4.0
    assert max_goodput_rate(points, 0.99) == 1.0


def test_max_goodput_rate_none_when_no_rate_makes_it() -> None:
    assert max_goodput_rate([(1.0, 0.5), (2.0, 0.1)], 0.9) is None


def test_max_goodput_rate_can_be_infinite() -> None:
    assert max_goodput_rate([(1.0, 1.0), (math.inf, 0.95)], 0.9) == math.inf


def test_sweep_result_keeps_runs_in_order() -> None:
    runs = [{"request_rate": r, "slo_attainment": a} for r, a in [(2.0, 0.5), (1.0, 0.92)]]
    result = sweep_result(runs, 0.9)
    assert result["max_goodput_rate"] == 1.0
    assert result["goodput_share"] == 0.9
    assert [run["request_rate"] for run in result["runs"]] == [2.0, 1.0]
