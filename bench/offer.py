"""Offering one rate's load from one event loop: each request at its arrival time, the turns
of a conversation in order, and a ticker that samples how late the loop runs.

The bench's own event loop is part of the measurement: if it runs late, every TTFT and ITL
it records is late by as much. The ticker samples that lateness every 10 ms so a run can say
when its numbers are not to be trusted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from bench.records import RequestRecord
from bench.summary import LoopLag, loop_lag
from domain.workload.datasets import BenchRequest

LAG_TICK = 0.010


class Sender(Protocol):
    async def send(self, request: BenchRequest, index: int = 0) -> RequestRecord: ...


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
    indices: Sequence[int] | None = None,
    start_at: float | None = None,
) -> tuple[list[RequestRecord], float, LoopLag]:
    """Offer each request at its arrival time and, for a later turn of a conversation, not
    before the turn it follows has finished; wait for all. A late dispatcher catches up at
    once rather than shifting every later arrival.

    `indices` picks the requests this loop offers (a worker's share; default all of them),
    `start_at` the perf_counter instant that arrival 0.0 is (default now); records' `start`
    and the duration are seconds from it."""
    loop = asyncio.get_running_loop()
    chosen = range(len(requests)) if indices is None else indices
    finished = {index: asyncio.Event() for index in chosen}
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

    started = time.perf_counter() if start_at is None else start_at
    origin = loop.time() + (started - time.perf_counter())
    tasks = []
    try:
        for index in chosen:
            delay = origin + arrivals[index] - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(offer(index, requests[index])))
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
