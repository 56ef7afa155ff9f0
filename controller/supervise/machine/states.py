"""What one supervised process's machine holds: its states, the policy that times it, and the
immutable `Machine` value each step replaces (controller/supervise/machine/transitions.py)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class State(enum.StrEnum):
    STOPPED = "STOPPED"  # not wanted, no process
    STARTING = "STARTING"  # process spawned (or adopted), not yet ready
    RUNNING = "RUNNING"  # ready: /health answers (and registered, for MoRIIO)
    BACKOFF = "BACKOFF"  # a start or run failed; waiting before the next try
    STOPPING = "STOPPING"  # on its way down: draining, then SIGTERM, then SIGKILL
    EXITED = "EXITED"  # found dead (adoption) or exited with restarts off; no process
    FATAL = "FATAL"  # gave up after too many failed starts; an operator must act


class Phase(enum.StrEnum):
    """Where a STOPPING instance is on its way down."""

    DRAIN = "drain"  # the proxy sends it nothing new; waiting for in-flight requests
    TERM = "term"  # SIGTERM sent to its process group
    KILL = "kill"  # SIGKILL sent to its process group


class After(enum.StrEnum):
    """What a STOPPING instance does once its process is gone."""

    STOP = "stop"  # stay STOPPED (operator stop)
    RESTART = "restart"  # spawn again at once (operator restart)
    BACKOFF = "backoff"  # count a failure, restart after a delay (start timeout, failed health)


@dataclass(frozen=True, slots=True)
class Policy:
    backoff_base: float = 1.0  # delay after the first failure; doubles per consecutive failure
    backoff_cap: float = 30.0
    max_failed_starts: int = 5  # consecutive failures before FATAL
    start_timeout: float = 600.0  # spawn to ready (a big model loads for minutes)
    drain_timeout: float = 30.0  # drained in the proxy -> SIGTERM at the latest
    term_timeout: float = 30.0  # SIGTERM -> SIGKILL
    kill_timeout: float = 10.0  # SIGKILL -> give up waiting (FATAL)
    autorestart: bool = True  # False: a process that exits on its own stays EXITED

    def backoff_delay(self, failures: int) -> float:
        return min(self.backoff_cap, self.backoff_base * 2 ** max(0, failures - 1))


@dataclass(frozen=True, slots=True)
class Machine:
    """One instance's state; immutable, replaced by each step."""

    state: State = State.STOPPED
    pid: int | None = None
    failures: int = 0  # consecutive failed starts/runs since the last successful start
    restarts: int = 0  # spawns after the first one
    spawned: bool = False  # spawned at least once (so the next spawn is a restart)
    started_at: float | None = None  # when the current process was spawned or adopted
    ready_at: float | None = None  # when it last became RUNNING
    last_exit: int | None = None  # exit code (-N: killed by signal N); None if unknown
    deadline: float | None = None  # when the current state's timer fires (a Tick at or after)
    phase: Phase | None = None  # STOPPING only
    after: After | None = None  # STOPPING only
    policy: Policy = field(default_factory=Policy)


class MachineMisuse(ValueError):
    """An event that cannot happen in this state (a bug in the shell, not an operator error)."""


def uptime(m: Machine, now: float) -> float | None:
    """Seconds since the current process was spawned or adopted; None without a process."""
    if m.started_at is None or m.state not in (State.STARTING, State.RUNNING, State.STOPPING):
        return None
    return max(0.0, now - m.started_at)
