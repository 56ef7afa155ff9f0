"""Drive a scheduler on a virtual clock: no sockets, no sleeping, steady stretches jumped.

This is what the planner and the tests run; the server drives the same scheduler on the
wall clock instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from simulator.engine.request import EngineRequest
from simulator.engine.scheduler import Scheduler


def run_engine(
    scheduler: Scheduler, requests: Iterable[EngineRequest], until: float = math.inf
) -> float:
    """Feed `requests` at their arrival times and run until all finish (or `until`).

    Returns the virtual time at which the last step ended.
    """
    pending = sorted(requests, key=lambda r: r.arrival_time)
    i, n = 0, len(pending)
    now = pending[0].arrival_time if pending else 0.0
    while now < until:
        while i < n and pending[i].arrival_time <= now:
            scheduler.add_request(pending[i])
            i += 1
        next_arrival = pending[i].arrival_time if i < n else math.inf
        if not scheduler.has_work:
            if i >= n:
                break
            now = next_arrival
            continue
        steps = scheduler.steady_steps(now, min(next_arrival, until))
        out = scheduler.advance_steady(now, steps) if steps else scheduler.step(now)
        if out.steps == 0:
            if i >= n:
                break  # stuck (e.g. decode legs waiting for KV that never comes)
            now = next_arrival
            continue
        now = out.end
    return now
