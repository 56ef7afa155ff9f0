"""Running a bench: the dataset, each rate's arrival schedule, the progress bar, rate sweeps.

One rate's load is offered by bench/offer.py from this process, or by worker processes
(bench/workers/pool.py) with `--workers N`.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench import model_prompts
from bench.client import BenchClient, fetch_metrics, fetch_model, open_session
from bench.config import BenchConfig
from bench.offer import LAG_TICK, Sender, run_once, watch_loop_lag
from bench.records import RequestRecord
from bench.summary import LoopLag, summarize
from bench.workers.pool import WorkerLag, WorkerPool
from domain.measures.engine_phases import phase_means, phase_totals
from domain.workload.arrivals import arrival_times
from domain.workload.datasets import (
    BenchRequest,
    multi_turn_requests,
    random_requests,
    shared_prefix_requests,
)
from domain.workload.vllm_arrivals import vllm_arrival_times

__all__ = [
    "LAG_TICK",
    "RunOutcome",
    "Sender",
    "arrival_schedule",
    "build_requests",
    "run_bench",
    "run_once",
    "watch_loop_lag",
]


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
    requests = random_requests(*args, rng)
    if config.tokenizer is not None:
        return model_prompts.in_model_tokens(requests, model_prompts.load(config.tokenizer), rng)
    return requests


def arrival_schedule(config: BenchConfig, rate: float, count: int) -> list[float]:
    """When each request is offered at `rate`: pdctl's seeded gamma gaps, or vLLM's."""
    if config.arrivals == "vllm":
        return vllm_arrival_times(count, rate, config.burstiness, config.seed)
    return arrival_times(count, rate, config.burstiness, random.Random(f"{config.seed}:arrivals"))


def run_metadata(
    config: BenchConfig,
    model: str,
    rate: float,
    lag: LoopLag,
    per_worker: Sequence[WorkerLag] | None = None,
) -> dict[str, Any]:
    """The fields vLLM writes about the run itself, plus our own loop-lag figures (the worst
    worker's, and each worker's under `event_loop_lag_per_worker` when there are several)."""
    metadata: dict[str, Any] = {
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
        "arrivals": config.arrivals,
        "workers": config.workers,
        "event_loop_lag_max_ms": lag.max_ms,
        "event_loop_lag_p99_ms": lag.p99_ms,
        "event_loop_lag_flagged": lag.exceeds(config.slo.itl_ms),
    }
    if per_worker is not None:
        metadata["event_loop_lag_per_worker"] = [w.to_json() for w in per_worker]
    return metadata


async def run_bench(
    config: BenchConfig,
    console: Console | None = None,
    show_progress: bool = False,
    on_request: Callable[[RequestRecord], None] | None = None,
    on_rate: Callable[[list[RunOutcome]], None] | None = None,
) -> list[RunOutcome]:
    """Run every rate of `config.request_rates` in order; `on_request` hears of each finished
    request (`--progress-file`), `on_rate` of the rates measured so far after each one
    (before the next starts). With `config.workers` > 1 the worker processes offer the load
    (bench/workers/pool.py) and report their requests when each rate ends."""
    requests = build_requests(config)
    outcomes = []
    async with open_session(config) as session:
        model = config.model or await fetch_model(session, config)
        async with (
            WorkerPool(config, model) if config.workers > 1 else contextlib.nullcontext()
        ) as pool:
            client = BenchClient(session, config, model)
            for rate in config.request_rates:
                arrivals = arrival_schedule(config, rate, len(requests))
                before = await fetch_metrics(session, config)
                with _ProgressBar(console, show_progress, rate, len(requests)) as advance:
                    on_done = advance if on_request is None else _both(advance, on_request)
                    if pool is None:
                        client.prepare(requests, range(len(requests)))
                        records, duration, lag = await run_once(client, requests, arrivals, on_done)
                        per_worker = None
                    else:
                        records, duration, lag, per_worker = await pool.run(requests, arrivals)
                        for record in records:
                            on_done(record)
                summary = run_metadata(config, model, rate, lag, per_worker)
                summary.update(summarize(records, duration, config.slo))
                phases = _engine_phases(before, await fetch_metrics(session, config))
                if phases:
                    summary["engine_phases"] = phases
                outcomes.append(RunOutcome(rate, records, duration, lag, summary))
                if on_rate is not None:
                    on_rate(list(outcomes))
    return outcomes


def _engine_phases(before: str | None, after: str | None) -> dict[str, float]:
    """The engine's own mean queue, prefill and decode time over the run (its /metrics
    before and after), when the server is an engine; {} otherwise."""
    if before is None or after is None:
        return {}
    try:
        return phase_means(phase_totals(before), phase_totals(after))
    except ValueError:  # not Prometheus text
        return {}


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
