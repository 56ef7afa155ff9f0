"""`--workers N`: shares of the load per process, the concurrency split, honest loop lag, and
a run through real worker processes merging into one summary."""

from __future__ import annotations

import asyncio
import math

from bench.config import BenchConfig
from bench.records import SloTargets
from bench.report import lag_warning
from bench.runner import build_requests, run_bench
from bench.workers.pool import WorkerLag, merge_lag, shares, split_concurrency
from tests.bench.sse_server import FakeEngine, serving


def test_turns_of_one_conversation_go_to_one_worker() -> None:
    config = BenchConfig(
        base_url="http://x", dataset="multi-turn", num_prompts=12, turns=3, input_len=4
    )
    requests = build_requests(config)
    split = shares(requests, 2)
    assert sorted(i for share in split for i in share) == list(range(12))
    for share in split:
        for index in share:
            after = requests[index].after
            assert after is None or after in share


def test_concurrency_cap_is_split_without_losing_a_slot() -> None:
    assert split_concurrency(10, 3) == [4, 3, 3]
    assert split_concurrency(None, 2) == [None, None]


def test_run_lag_is_the_worst_worker_and_a_late_start_counts() -> None:
    lag = merge_lag([WorkerLag(0, 2.0, 1.0, 100, 0.0), WorkerLag(1, 3.0, 2.5, 90, 7.0)])
    assert (lag.max_ms, lag.p99_ms, lag.samples) == (7.0, 2.5, 190)


def test_lag_warning_names_the_worker_that_ran_late() -> None:
    summary = {
        "request_rate": 4.0,
        "event_loop_lag_flagged": True,
        "event_loop_lag_max_ms": 9.0,
        "slo_itl_ms": 50.0,
        "event_loop_lag_per_worker": [
            {"worker": 0, "max_ms": 1.0, "p99_ms": 0.5, "samples": 9, "late_start_ms": 0.0},
            {"worker": 1, "max_ms": 9.0, "p99_ms": 4.0, "samples": 9, "late_start_ms": 0.0},
        ],
    }
    assert "worker 1 of 2" in (lag_warning(summary) or "")


def test_workers_offer_every_request_once_and_merge_one_summary() -> None:
    engine = FakeEngine(token_delay=0.002)

    async def go() -> list:
        async with serving(engine) as url:
            config = BenchConfig(
                base_url=url,
                request_rates=(100.0, math.inf),
                num_prompts=10,
                input_len=8,
                output_len=3,
                workers=2,
                max_concurrency=4,
                slo=SloTargets(ttft_ms=5000, itl_ms=5000),
            )
            return await run_bench(config)

    outcomes = asyncio.run(go())
    assert len(engine.payloads) == 20
    for outcome in outcomes:
        assert [r.index for r in outcome.records] == list(range(10))
        assert all(r.ok for r in outcome.records)
        summary = outcome.summary
        assert summary["completed"] == 10 and summary["workers"] == 2
        per_worker = summary["event_loop_lag_per_worker"]
        assert [w["worker"] for w in per_worker] == [0, 1]
        worst = max(max(w["max_ms"], w["late_start_ms"]) for w in per_worker)
        assert summary["event_loop_lag_max_ms"] == worst
    # both rates send the same prompts, whichever worker sent them
    first = sorted(p["prompt"] for p in engine.payloads[:10])
    assert first == sorted(p["prompt"] for p in engine.payloads[10:])
