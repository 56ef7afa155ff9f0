"""bench-proxy's report: added TTFT read against the paired direct round, and the ratios."""

from __future__ import annotations

import pytest

from benchmarks.proxy_report import Row, combine, pair, ratios


def _result(p50: float, p99: float, tokens: int = 1000, done: int = 10) -> dict:
    return {
        "median_ttft_ms": p50,
        "p99_ttft_ms": p99,
        "median_itl_ms": 1.0,
        "output_throughput": 100.0,
        "completed": done,
        "failed": 0,
        "total_output_tokens": tokens,
    }


def _row(name: str, cpu: float, rounds: list[tuple[tuple[float, float], tuple[float, float]]]):
    runs = []
    for path, direct in rounds:
        run = Row(name, _result(*path), cpu / len(rounds))
        run.paired.append(pair(run.result, _result(*direct)))
        runs.append(run)
    return combine(name, runs)


def test_added_ttft_is_the_median_of_each_round_minus_its_own_direct_round() -> None:
    # the machine slowed down in round 2: both runs of that pair moved, the difference did not
    row = _row("pdctl", 1.0, [((11, 20), (10, 18)), ((31, 45), (30, 43)), ((12, 21), (10, 19))])
    assert row.added == (pytest.approx(1.0), pytest.approx(2.0))
    assert row.result["completed"] == 30 and row.cpu == pytest.approx(1.0)


def test_ratios_name_the_breakdown_and_the_canary_cost() -> None:
    one = [((11, 20), (10, 18))]
    rows = [
        _row("pdctl", 1.0, one),
        _row("vllm-router", 0.8, [((10.5, 19), (10, 18))]),
        _row("pdctl no-parts", 0.9, one),
        _row("pdctl canary", 1.05, one),
    ]
    text = ratios(rows, check_s=1e-6)
    assert "pdctl / vllm-router CPU per 1k tokens: 1.250" in text
    assert "pdctl / pdctl no-parts CPU: 1.111" in text
    assert "pdctl canary / pdctl CPU: 1.050" in text
    assert "1.00 us = 0.00% of pdctl's 100000 us CPU per request" in text
    assert "minus vllm-router's: p50 +0.50 / p99 +1.00 ms (vllm-router rounds: +0.5)" in text
    assert "pdctl: added TTFT p50 +1.00 / p99 +2.00 ms (rounds: +1.0)" in text
