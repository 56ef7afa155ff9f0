"""What the process machine (controller/supervise/machine/) hears and says: the events the
supervisor feeds it and the actions it asks the supervisor to perform. Plain frozen values, no
behaviour."""

from __future__ import annotations

from dataclasses import dataclass

# Events -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """The operator (or reconciliation) wants it running."""


@dataclass(frozen=True, slots=True)
class Spawned:
    """The backend started the process; `pid` is the child's (its process group id)."""

    pid: int


@dataclass(frozen=True, slots=True)
class Healthy:
    """Ready: /health answered (and, for MoRIIO, the proxy lists its registration)."""


@dataclass(frozen=True, slots=True)
class HealthFailed:
    """A RUNNING instance stopped answering (the shell decides after how many probes)."""

    reason: str = "health check failed"


@dataclass(frozen=True, slots=True)
class Exited:
    """The process is gone; `code` is its exit status (-N: signal N), None if unknown."""

    code: int | None


@dataclass(frozen=True, slots=True)
class Drained:
    """The proxy reports no request in flight on it any more."""


@dataclass(frozen=True, slots=True)
class Stop:
    """The operator wants it stopped."""


@dataclass(frozen=True, slots=True)
class Restart:
    """The operator wants a fresh process (stop, then start at once; not a failure)."""


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed; fires the state's timer if its deadline is due (stale ticks do nothing)."""


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """No node can take the process (its node was lost and none other fits)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Adopt:
    """Found at supervisor start from a state file: `alive` = pid alive with its start time."""

    pid: int | None  # None: a dead one's settled record named no child
    alive: bool
    exit_code: int | None = None
    restarts: int = 0


Event = (
    Start
    | Spawned
    | Healthy
    | HealthFailed
    | Exited
    | Drained
    | Stop
    | Restart
    | Tick
    | Adopt
    | Unplaceable
)


# Actions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Spawn:
    """Start a new process (under the shim)."""


@dataclass(frozen=True, slots=True)
class Kill:
    """Send `signal` to the whole process group."""

    signal: int


@dataclass(frozen=True, slots=True)
class Drain:
    """Tell the proxy to send it nothing new."""


@dataclass(frozen=True, slots=True)
class Undrain:
    """Tell the proxy it may route to it again."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """Wake me (send a Tick) at `at`."""

    at: float


@dataclass(frozen=True, slots=True)
class Emit:
    """Record an event for the operator: `kind` is a short tag, `message` plain words."""

    kind: str
    message: str


Action = Spawn | Kill | Drain | Undrain | Schedule | Emit
