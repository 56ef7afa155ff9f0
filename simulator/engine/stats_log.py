"""vLLM's periodic stats line, which the stand-in prints as vLLM does (its LoggingStatLogger):
every VLLM_LOG_STATS_INTERVAL seconds (default 10), at INFO while tokens move, nothing on an
idle engine; `--disable-log-stats` turns it off. This is what fills an instance's log under
load, so a full log disk shows up with the stand-in as it does with vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from simulator.engine.scheduler import Scheduler

DEFAULT_INTERVAL_S = 10.0


def interval_from(env: Mapping[str, str]) -> float:
    """VLLM_LOG_STATS_INTERVAL in seconds; a value that is not a positive number: the default."""
    try:
        value = float(env.get("VLLM_LOG_STATS_INTERVAL", DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S


@dataclass(slots=True)
class StatsLine:
    """Throughput between two calls of `line`, from the scheduler's cumulative counters."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    queries: int = 0
    hits: int = 0
    last_prompt_tps: float = 0.0
    last_generation_tps: float = 0.0

    def line(self, s: Scheduler, seconds: float, now_text: str) -> str | None:
        """The line for the last `seconds`, or None when this interval and the one before
        were idle (vLLM logs those at DEBUG)."""
        c = s.counters
        prompt_tps = (c.prompt_tokens - self.prompt_tokens) / seconds
        generation_tps = (c.generation_tokens - self.generation_tokens) / seconds
        queries, hits = c.prefix_cache_queries - self.queries, c.prefix_cache_hits - self.hits
        idle = not any((prompt_tps, generation_tps, self.last_prompt_tps, self.last_generation_tps))
        self.prompt_tokens, self.generation_tokens = c.prompt_tokens, c.generation_tokens
        self.queries, self.hits = c.prefix_cache_queries, c.prefix_cache_hits
        self.last_prompt_tps, self.last_generation_tps = prompt_tps, generation_tps
        if idle:
            return None
        return (
            f"INFO {now_text} [loggers.py] Engine 000: "
            f"Avg prompt throughput: {prompt_tps:.1f} tokens/s, "
            f"Avg generation throughput: {generation_tps:.1f} tokens/s, "
            f"Running: {s.num_running} reqs, Waiting: {s.num_waiting} reqs, "
            f"GPU KV cache usage: {s.kv_cache_usage * 100:.1f}%, "
            f"Prefix cache hit rate: {100 * hits / queries if queries else 0.0:.1f}%"
        )


async def log_stats(
    scheduler: Scheduler,
    interval_s: float,
    out: Callable[[str], None] = lambda text: print(text, flush=True),
) -> None:
    """Print the stats line every `interval_s` until cancelled."""
    stats = StatsLine()
    while True:
        await asyncio.sleep(interval_s)
        text = stats.line(scheduler, interval_s, time.strftime("%m-%d %H:%M:%S"))
        if text is not None:
            with contextlib.suppress(OSError):  # nobody reads our output: keep serving
                out(text)
