"""`pdctl bench --workers N`: several processes offer one rate's load, when one event loop
cannot keep up with the arrivals and the streams it must time.

Each worker has its own event loop, session and lag ticker, and offers its share of the
requests (whole conversations, so the turns of one stay in order in one process) at their
arrival times, all counted from one perf_counter instant (CLOCK_MONOTONIC, the same in every
process on Linux). The parent merges the records in dataset order, so the summary and JSON
are those of one run; each worker's loop lag is reported, and the run's is the worst one's.
A `--max-concurrency` cap is split between the workers. Records reach `--progress-file`
when the rate ends, not as each request does: the workers only measure.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
import time
from asyncio.subprocess import PIPE
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.config import BenchConfig
from bench.records import RequestRecord
from bench.summary import LoopLag
from domain.workload.datasets import BenchRequest

START_LEAD_S = 0.5  # for the tasks to reach the warmed-up workers and encode their bodies
WARM_TIMEOUT_S = 60.0
ROOT = str(Path(__file__).resolve().parents[2])


@dataclass(frozen=True)
class WorkerLag:
    """One worker's loop lag, and how late it began after the shared start instant."""

    worker: int
    max_ms: float
    p99_ms: float
    samples: int
    late_start_ms: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ShareResult:
    records: list[RequestRecord]
    end: float  # perf_counter when its last request ended
    lag: LoopLag
    late_start: float


def shares(requests: Sequence[BenchRequest], workers: int) -> list[list[int]]:
    """The request indices each worker offers: conversation c goes to worker c % workers."""
    out: list[list[int]] = [[] for _ in range(workers)]
    for index, request in enumerate(requests):
        out[request.conversation % workers].append(index)
    return out


def split_concurrency(limit: int | None, workers: int) -> list[int | None]:
    """Each worker's share of a `--max-concurrency` cap (the first ones take the remainder)."""
    if limit is None:
        return [None] * workers
    return [limit // workers + (i < limit % workers) for i in range(workers)]


def merge_lag(per_worker: Sequence[WorkerLag]) -> LoopLag:
    """The run's loop lag: the worst worker's; a worker that began late counts that too."""
    return LoopLag(
        max_ms=max((max(w.max_ms, w.late_start_ms) for w in per_worker), default=0.0),
        p99_ms=max((w.p99_ms for w in per_worker), default=0.0),
        samples=sum(w.samples for w in per_worker),
    )


class WorkerPool:
    """`workers` processes (`python -m bench.workers.process`) for every rate of one run, each
    started and its imports done before the first rate's clock starts (async with).

    A job and its result travel as length-prefixed pickles over the worker's stdin/stdout
    (our own processes, our own types); stderr is the run's, so a worker's traceback shows."""

    def __init__(self, config: BenchConfig, model: str) -> None:
        self.config, self.model = config, model
        self._procs: list[asyncio.subprocess.Process] = []

    async def __aenter__(self) -> WorkerPool:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
        }
        for _ in range(self.config.workers):
            self._procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "bench.workers.process", stdin=PIPE, stdout=PIPE, env=env
                )
            )
        try:
            async with asyncio.timeout(WARM_TIMEOUT_S):
                for proc in self._procs:
                    await _receive(proc)  # "ready", once its imports are done
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for proc in self._procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in self._procs:
            try:
                async with asyncio.timeout(5):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()

    async def run(
        self, requests: Sequence[BenchRequest], arrivals: Sequence[float]
    ) -> tuple[list[RequestRecord], float, LoopLag, list[WorkerLag]]:
        """One rate: records in dataset order, duration, merged and per-worker loop lag."""
        start_at = time.perf_counter() + START_LEAD_S
        caps = split_concurrency(self.config.max_concurrency, self.config.workers)
        jobs = zip(self._procs, shares(requests, self.config.workers), caps, strict=True)
        for proc, indices, cap in jobs:
            config = replace(self.config, max_concurrency=cap, workers=1)
            _send(proc, (config, self.model, list(requests), list(arrivals), indices, start_at))
        results: list[ShareResult] = [await _receive(proc) for proc in self._procs]
        records = sorted((r for result in results for r in result.records), key=_index)
        duration = max((result.end for result in results), default=start_at) - start_at
        per_worker = [
            WorkerLag(i, r.lag.max_ms, r.lag.p99_ms, r.lag.samples, r.late_start * 1000)
            for i, r in enumerate(results)
        ]
        return records, duration, merge_lag(per_worker), per_worker


def _send(proc: asyncio.subprocess.Process, message: object) -> None:
    if proc.stdin is None:
        raise WorkerFailed(f"bench worker {proc.pid} has no stdin")
    data = pickle.dumps(message)
    proc.stdin.write(len(data).to_bytes(8, "little") + data)


async def _receive(proc: asyncio.subprocess.Process) -> Any:
    if proc.stdout is None:
        raise WorkerFailed(f"bench worker {proc.pid} has no stdout")
    try:
        size = int.from_bytes(await proc.stdout.readexactly(8), "little")
        return pickle.loads(await proc.stdout.readexactly(size))
    except asyncio.IncompleteReadError:
        raise WorkerFailed(f"bench worker {proc.pid} exited (code {await proc.wait()})") from None


class WorkerFailed(Exception):
    """A worker process died; its share of the rate is lost, so the run stops."""


def run_share(
    config: BenchConfig,
    model: str,
    requests: list[BenchRequest],
    arrivals: list[float],
    indices: list[int],
    start_at: float,
) -> ShareResult:
    """In a worker process: offer `indices` of the requests on a fresh loop (uvloop)."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_share(config, model, requests, arrivals, indices, start_at))


async def _share(
    config: BenchConfig,
    model: str,
    requests: list[BenchRequest],
    arrivals: list[float],
    indices: list[int],
    start_at: float,
) -> ShareResult:
    from bench.client import BenchClient, open_session
    from bench.offer import run_once

    async with open_session(config) as session:
        client = BenchClient(session, config, model)
        client.prepare(requests, indices)
        late_start = max(0.0, time.perf_counter() - start_at)
        records, duration, lag = await run_once(
            client, requests, arrivals, indices=indices, start_at=start_at
        )
    end = start_at + duration
    return ShareResult(records, end, lag, late_start)


def _index(record: RequestRecord) -> int:
    return record.index
