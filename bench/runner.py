"""Offering the load: arrivals on the event loop, a progress bar, a lag watch, rate sweeps.

The bench's own event loop is part of the measurement: if it runs late, every TTFT and ITL
it records is late by as much. A ticker samples that lateness every 10 ms so a run can say
when its numbers are not to be trusted.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench.client import BenchClient, fetch_model, open_session
from bench.config import BenchConfig
from bench.records import RequestRecord
from bench.summary import LoopLag, loop_lag, summarize
from domain.arrivals import arrival_times
from domain.datasets import (
    BenchRequest,
    multi_turn_requests,
    random_requests,
    shared_prefix_requests,
)

LAG_TICK = 0.010


class Sender(Protocol):
    async def send(self, request: BenchRequest, index: int = 0) -> RequestRecord: ...


@dataclass
class RunOutcome:
    """One rate's raw result: records in dataset order, wall duration and loop lag."""

    rate: float
    records: list[RequestRecord]
    duration: float
    lag: LoopLag
    summary: dict[str, Any] = field(default_factory=dict)


def build_requests(config: BenchConfig) -> list[BenchRequest]:
    """The dataset the flags ask for; seeded so every rate of a sweep sends the same prompts."""
    rng = random.Random(config.seed)
    args = (config.num_prompts, config.input_len, config.output_len, config.range_ratio)
    if config.dataset == "shared-prefix":
        return shared_prefix_requests(*args, config.prefix_len, config.num_prefixes, rng)
    if config.dataset == "multi-turn":
        return multi_turn_requests(*args, config.turns, rng)
    return random_requests(*args, rng)


async def watch_loop_lag(samples: list[float], tick: float = LAG_TICK) -> None:
    """Append how late each `tick`-second sleep woke up, until cancelled.

    Timed with perf_counter rather than loop.time(): uvloop's loop clock has millisecond
    resolution, which would round a tight ITL budget's share away.
    """
    while True:
        due = time.perf_counter() + tick
        await asyncio.sleep(tick)
        samples.append(max(0.0, time.perf_counter() - due))


async def run_once(
    sender: Sender,
    requests: Sequence[BenchRequest],
    arrivals: Sequence[float],
    on_done: Callable[[RequestRecord], None] = lambda record: None,
) -> tuple[list[RequestRecord], float, LoopLag]:
    """Offer each request at its arrival time and, for a later turn of a conversation, not
    before the turn it follows has finished; wait for all. A late dispatcher catches up at
    once rather than shifting every later arrival."""
    loop = asyncio.get_running_loop()
    finished = [asyncio.Event() for _ in requests]
    lag_samples: list[float] = []
    ticker = asyncio.create_task(watch_loop_lag(lag_samples))

    async def offer(index: int, request: BenchRequest) -> RequestRecord:
        try:
            if request.after is not None:
                await finished[request.after].wait()
            record = await sender.send(request, index)
        finally:
            finished[index].set()
        on_done(record)
        return record

    started = time.perf_counter()
    origin = loop.time()
    tasks = []
    try:
        for index, (request, at) in enumerate(zip(requests, arrivals, strict=True)):
            delay = origin + at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(offer(index, request)))
        records = list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        ticker.cancel()
        await asyncio.gather(ticker, *tasks, return_exceptions=True)
    duration = time.perf_counter() - started
    for record in records:
        record.start -= started  # seconds into the run, comparable across records
    return records, duration, loop_lag(lag_samples)


def run_metadata(config: BenchConfig, model: str, rate: float, lag: LoopLag) -> dict[str, Any]:
    """The fields vLLM writes about the run itself, plus our own loop-lag figures."""
    return {
        "date": time.strftime("%Y%m%d-%H%M%S"),
        "backend": "openai-chat" if config.endpoint == "chat" else "openai",
        "endpoint": config.api_url,
        "model_id": model,
        "dataset": config.dataset,
        "num_prompts": config.num_prompts,
        "input_len": config.input_len,
        "output_len": config.output_len,
        "range_ratio": config.range_ratio,
        "request_rate": rate,
        "burstiness": config.burstiness,
        "max_concurrency": config.max_concurrency,
        "seed": config.seed,
        "event_loop_lag_max_ms": lag.max_ms,
        "event_loop_lag_p99_ms": lag.p99_ms,
        "event_loop_lag_flagged": lag.exceeds(config.slo.itl_ms),
    }


async def run_bench(
    config: BenchConfig,
    console: Console | None = None,
    show_progress: bool = False,
    on_request: Callable[[RequestRecord], None] | None = None,
    on_rate: Callable[[list[RunOutcome]], None] | None = None,
) -> list[RunOutcome]:
    """Run every rate of `config.request_rates` in order against one session; `on_request`
    hears of each finished request (`--progress-file`), `on_rate` of the rates measured so
    far after each one (before the next starts)."""
    requests = build_requests(config)
    outcomes = []
    async with open_session(config) as session:
        model = config.model or await fetch_model(session, config)
        client = BenchClient(session, config, model)
        for rate in config.request_rates:
            arrivals = arrival_times(
                len(requests), rate, config.burstiness, random.Random(f"{config.seed}:arrivals")
            )
            with _ProgressBar(console, show_progress, rate, len(requests)) as advance:
                on_done = advance if on_request is None else _both(advance, on_request)
                records, duration, lag = await run_once(client, requests, arrivals, on_done)
            summary = run_metadata(config, model, rate, lag)
            summary.update(summarize(records, duration, config.slo))
            outcomes.append(RunOutcome(rate, records, duration, lag, summary))
            if on_rate is not None:
                on_rate(list(outcomes))
    return outcomes


def _both(
    first: Callable[[RequestRecord], None], second: Callable[[RequestRecord], None]
) -> Callable[[RequestRecord], None]:
    def call(record: RequestRecord) -> None:
        first(record)
        second(record)

    return call


class _ProgressBar:
    """A rich progress bar for one rate, or a no-op when it would only clutter a log."""

    def __init__(self, console: Console | None, enabled: bool, rate: float, total: int) -> None:
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not enabled,
            refresh_per_second=4,  # the refresh thread takes the GIL from the loop we time
            transient=False,
        )
        label = "inf" if math.isinf(rate) else f"{rate:g}"
        self._task = self._bar.add_task(f"rate {label} req/s", total=total, failed=0)
        self._failed = 0

    def __enter__(self) -> Callable[[RequestRecord], None]:
        self._bar.start()
        return self._advance

    def __exit__(self, *exc_info: object) -> None:
        self._bar.stop()

    def _advance(self, record: RequestRecord) -> None:
        self._failed += not record.ok
        self._bar.update(self._task, advance=1, failed=self._failed)
