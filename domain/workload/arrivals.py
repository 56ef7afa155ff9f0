"""Arrival schedules for `pdctl bench`: when each request is offered, as `vllm bench serve` does.

Gaps between arrivals are gamma distributed with shape = burstiness and mean 1 / rate, so
burstiness 1.0 is a Poisson process, below 1 is burstier and above 1 is more regular, while
the offered rate stays the same. Pure: a seeded `random.Random` in, seconds out.
"""

from __future__ import annotations

import math
import random


def arrival_times(count: int, rate: float, burstiness: float, rng: random.Random) -> list[float]:
    """Offsets in seconds from the start of the run at which each of `count` requests arrives.

    An infinite rate offers everything at once (all zeros), like vLLM's `--request-rate inf`.
    The first request waits one gap too, as in vLLM, so the mean rate holds for small runs.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if math.isinf(rate):
        return [0.0] * count
    scale = 1.0 / (rate * burstiness)
    times: list[float] = []
    now = 0.0
    for _ in range(count):
        now += rng.gammavariate(burstiness, scale)
        times.append(now)
    return times
