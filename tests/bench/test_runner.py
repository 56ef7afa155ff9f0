"""Offering load: arrival timing, sequential turns, loop lag, sweeps against a real server."""

from __future__ import annotations

import asyncio
import io
import json
import math
import time
from dataclasses import replace

from rich.console import Console

from bench.config import BenchConfig
from bench.records import RequestRecord, SloTargets
from bench.runner import build_requests, run_bench, run_once, watch_loop_lag
from domain.workload.datasets import BenchRequest, Message
from tests.bench.sse_server import FakeEngine, serving


class RecordingSender:
    """Answers after `service` seconds and notes when each request was sent and finished."""

    def __init__(self, service: float = 0.0) -> None:
        self.service = service
        self.sent: dict[int, float] = {}
        self.done: dict[int, float] = {}

    async def send(self, request: BenchRequest, index: int = 0) -> RequestRecord:
        self.sent[index] = time.perf_counter()
        await asyncio.sleep(self.service)
        self.done[index] = time.perf_counter()
        return RequestRecord(
            ok=True, output_tokens=request.output_len, index=index, start=self.sent[index]
        )


def _requests(count: int) -> list[BenchRequest]:
    return [BenchRequest((Message("user", (i,)),), output_len=1) for i in range(count)]


def test_requests_go_out_no_earlier_than_their_arrival() -> None:
    sender = RecordingSender()
    arrivals = [0.0, 0.05, 0.10, 0.15]

    async def go() -> tuple[list[RequestRecord], float]:
        started = time.perf_counter()
        records, duration, _ = await run_once(sender, _requests(4), arrivals)
        offsets = [sender.sent[i] - started for i in range(4)]
        assert all(o >= a - 0.005 for o, a in zip(offsets, arrivals, strict=True))
        return records, duration

    records, duration = asyncio.run(go())
    assert [r.index for r in records] == [0, 1, 2, 3]
    assert 0.14 < duration < 2.0


def test_a_turn_waits_for_the_turn_before_it() -> None:
    sender = RecordingSender(service=0.05)
    first = BenchRequest((Message("user", (1,)),), output_len=1)
    second = BenchRequest((Message("user", (1,)),), output_len=1, turn=1, after=0)
    asyncio.run(run_once(sender, [first, second], [0.0, 0.0]))
    assert sender.sent[1] >= sender.done[0]


def test_every_record_is_reported_as_it_finishes() -> None:
    seen: list[int] = []
    asyncio.run(
        run_once(RecordingSender(), _requests(5), [0.0] * 5, lambda r: seen.append(r.index))
    )
    assert sorted(seen) == [0, 1, 2, 3, 4]


def test_loop_lag_watch_sees_a_blocked_loop() -> None:
    async def go() -> list[float]:
        samples: list[float] = []
        ticker = asyncio.create_task(watch_loop_lag(samples, tick=0.005))
        await asyncio.sleep(0.02)
        time.sleep(0.06)  # block the loop on purpose
        await asyncio.sleep(0.02)
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
        return samples

    samples = asyncio.run(go())
    assert max(samples) >= 0.04


def test_sweep_against_a_real_server_summarizes_each_rate() -> None:
    engine = FakeEngine(token_delay=0.002)

    async def go() -> list:
        async with serving(engine) as url:
            config = BenchConfig(
                base_url=url,
                request_rates=(200.0, math.inf),
                num_prompts=8,
                input_len=16,
                output_len=4,
                slo=SloTargets(ttft_ms=2000, itl_ms=1000),
            )
            return await run_bench(config)

    outcomes = asyncio.run(go())
    assert [o.rate for o in outcomes] == [200.0, math.inf]
    for outcome in outcomes:
        summary = outcome.summary
        assert summary["completed"] == 8 and summary["failed"] == 0
        assert summary["total_input_tokens"] == 8 * 16
        assert summary["total_output_tokens"] == 8 * 4
        assert summary["slo_attainment"] == 1.0
        assert summary["model_id"] == "ok"
        assert summary["request_rate"] == outcome.rate
        assert summary["event_loop_lag_max_ms"] >= 0
        # flagged exactly when the worst lag passed 10% of the 1,000 ms ITL target
        assert summary["event_loop_lag_flagged"] == (summary["event_loop_lag_max_ms"] > 100)
    assert len(engine.payloads) == 16

    # every rate sends the same prompts (the server sees them in the order they arrive: at
    # 200 req/s and all at once, concurrent connections need not keep the order they were sent)
    def sent(payloads: list[dict]) -> list[str]:
        return sorted(json.dumps(p, sort_keys=True) for p in payloads)

    assert sent(engine.payloads[:8]) == sent(engine.payloads[8:])


def test_each_rate_is_reported_as_it_ends_before_the_next_starts() -> None:
    engine = FakeEngine()
    heard: list[tuple[list[float], int]] = []

    async def go() -> None:
        async with serving(engine) as url:
            config = BenchConfig(
                base_url=url, request_rates=(300.0, 400.0), num_prompts=3, input_len=4, output_len=2
            )
            await run_bench(
                config,
                on_rate=lambda outcomes: heard.append(
                    ([o.rate for o in outcomes], len(engine.payloads))
                ),
            )

    asyncio.run(go())
    assert heard == [([300.0], 3), ([300.0, 400.0], 6)]


def test_failures_are_counted_not_raised() -> None:
    async def go() -> dict:
        async with serving(FakeEngine()) as url:
            config = BenchConfig(
                base_url=url, model="http-500", num_prompts=3, input_len=4, output_len=2
            )
            return (await run_bench(config))[0].summary

    summary = asyncio.run(go())
    assert summary["completed"] == 0 and summary["failed"] == 3
    assert summary["slo_attainment"] == 0.0


def test_multi_turn_chat_run_sends_growing_conversations() -> None:
    engine = FakeEngine()

    async def go() -> None:
        async with serving(engine) as url:
            config = BenchConfig(
                base_url=url,
                endpoint="chat",
                dataset="multi-turn",
                turns=3,
                num_prompts=6,
                input_len=5,
                output_len=2,
            )
            (outcome,) = await run_bench(config)
            assert outcome.summary["completed"] == 6

    asyncio.run(go())
    sizes = sorted(len(p["messages"]) for p in engine.payloads)
    assert sizes == [1, 1, 3, 3, 5, 5]


def test_progress_bar_draws_on_a_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)

    async def go() -> None:
        async with serving(FakeEngine()) as url:
            config = BenchConfig(base_url=url, num_prompts=3, input_len=4, output_len=2)
            await run_bench(config, console, show_progress=True)

    asyncio.run(go())
    assert "rate inf req/s" in out.getvalue()
    assert "3/3" in out.getvalue()


def test_shared_prefix_dataset_from_flags() -> None:
    config = BenchConfig(
        base_url="http://h:1",
        dataset="shared-prefix",
        prefix_len=10,
        num_prefixes=2,
        num_prompts=4,
        input_len=3,
    )
    requests = build_requests(config)
    assert [r.prompt_len for r in requests] == [13] * 4
    assert requests[0].prompt_ids[:10] == requests[2].prompt_ids[:10]
    assert build_requests(replace(config, dataset="random"))[0].prompt_len == 3


def test_record_start_is_seconds_into_the_run() -> None:
    records, duration, _ = asyncio.run(run_once(RecordingSender(), _requests(3), [0.0, 0.03, 0.06]))
    assert all(0 <= r.start <= duration for r in records)
