"""The moves several transitions share (spawn, fail into BACKOFF or FATAL, terminate, SIGTERM):
each a pure (machine, now, why) -> (machine, actions), as the transitions themselves are."""

from __future__ import annotations

import signal
from dataclasses import replace

from controller.supervise.machine.messages import (
    Action,
    Drain,
    Emit,
    Kill,
    Schedule,
    Spawn,
)
from controller.supervise.machine.states import After, Machine, Phase, State


def spawn(m: Machine, now: float, why: str) -> tuple[Machine, list[Action]]:
    deadline = now + m.policy.start_timeout
    restarts = m.restarts + 1 if m.spawned else m.restarts
    return (
        replace(
            m,
            state=State.STARTING,
            pid=None,
            started_at=now,
            ready_at=None,
            spawned=True,
            restarts=restarts,
            deadline=deadline,
            phase=None,
            after=None,
        ),
        [Spawn(), Schedule(deadline), Emit("starting", why)],
    )


def fail(m: Machine, now: float, why: str, drain: bool = True) -> tuple[Machine, list[Action]]:
    failures = m.failures + 1
    first = [Drain()] if drain else []
    if failures >= m.policy.max_failed_starts:
        return (
            replace(m, state=State.FATAL, failures=failures, deadline=None),
            [*first, Emit("fatal", f"{why}; gave up after {failures} failures in a row")],
        )
    at = now + m.policy.backoff_delay(failures)
    return (
        replace(m, state=State.BACKOFF, failures=failures, deadline=at),
        [
            *first,
            Schedule(at),
            Emit("backoff", f"{why}; retry in {round(at - now, 3)} s (failure {failures})"),
        ],
    )


def terminate(
    m: Machine, now: float, after: After, why: str, drain_first: bool
) -> tuple[Machine, list[Action]]:
    stopping = replace(m, state=State.STOPPING, after=after)
    if drain_first:
        deadline = now + m.policy.drain_timeout
        return (
            replace(stopping, phase=Phase.DRAIN, deadline=deadline),
            [Drain(), Schedule(deadline), Emit("stopping", f"{why}: draining")],
        )
    m2, actions = sigterm(stopping, now, why)
    return m2, [Drain(), *actions]


def sigterm(m: Machine, now: float, why: str) -> tuple[Machine, list[Action]]:
    deadline = now + m.policy.term_timeout
    return (
        replace(m, phase=Phase.TERM, deadline=deadline),
        [Kill(signal.SIGTERM), Schedule(deadline), Emit("stopping", f"{why}: SIGTERM")],
    )
