"""bench-proxy's report: added TTFT read against the paired direct round, and the ratios."""

from __future__ import annotations

import pytest

from benchmarks.proxy.report import Row, against_direct, answered_ttfts, combine, pair, ratios


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
        run = Row(name, _result(*path), cpu / len(rounds), ttfts=[path[1] / 1000])
        run.paired.append(pair(run.result, _result(*direct)))
        runs.append(run)
    row = combine(name, runs)
    row.direct_ttfts = [direct[1] / 1000 for _, direct in rounds]  # the rounds' tails, pooled
    return row


def test_added_ttft_p50_is_the_median_of_each_round_minus_its_own_direct_round() -> None:
    # the machine slowed down in round 2: both runs of that pair moved, the difference did not
    row = _row("pdctl", 1.0, [((11, 20), (10, 18)), ((31, 45), (30, 43)), ((12, 21), (10, 19))])
    assert row.added[0] == pytest.approx(1.0)
    assert row.result["completed"] == 30 and row.cpu == pytest.approx(1.0)


def test_added_ttft_p99_pools_every_round_against_all_direct_runs() -> None:
    # Three rounds of 100 requests, 5 of each run slow (a burst): the pooled p99 is in the
    # slowest run's burst on either side, whichever round it fell in.
    def rows(path_tails: tuple, direct_tails: tuple) -> list[Row]:
        def runs(name: str, tails: tuple) -> list[Row]:
            return [
                Row(name, _result(10, 0), 1.0, [0.0], [0.010] * 95 + [t / 1000] * 5) for t in tails
            ]

        out = [
            combine("direct", runs("direct", direct_tails)),
            combine("pdctl", runs("pdctl", path_tails)),
        ]
        against_direct(out)
        return out

    assert rows((30, 12, 21), (12, 30, 20))[1].added[1] == pytest.approx(0.0)
    direct, pdctl = rows((30, 12, 21), (12, 25, 20))
    assert pdctl.added[1] == pytest.approx(5.0)
    assert direct.added is None  # the baseline adds nothing to itself


def test_a_row_without_answered_requests_adds_nothing() -> None:
    assert Row("pdctl", _result(10, 20), 1.0, [1.0]).added is None
    result = {"ttfts": [0.01, 0.0], "errors": ["", "HTTP 500"]}
    assert answered_ttfts(result) == [0.01]


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
