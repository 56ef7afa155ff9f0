"""The life of one supervised process, as a pure state machine: `step(state, event, now)`.

No I/O and no clock: the supervisor (controller/supervise/supervisor.py) feeds events in, with
`now`, and performs the actions that come out (spawn, signal, drain, wake me at, tell the event
log). The room: `messages` (what it hears and says), `states` (what it holds), `transitions`
(one handler per event) and `moves` (what several transitions share).

    STOPPED --start--> STARTING --healthy--> RUNNING
    STARTING --exited / start timeout--> BACKOFF --backoff elapsed--> STARTING
    BACKOFF/STARTING --N-th consecutive failed start--> FATAL
    RUNNING --exited / health failed--> BACKOFF (a crash is a failed run; restart after a delay)
    any live state --stop--> STOPPING: drain, SIGTERM, SIGKILL after a deadline --exited--> STOPPED
    (adoption) STOPPED --adopt(alive)--> STARTING (health confirms) / --adopt(dead)--> EXITED
"""

from controller.supervise.machine.messages import (
    Action,
    Adopt,
    Drain,
    Drained,
    Emit,
    Event,
    Exited,
    HealthFailed,
    Healthy,
    Kill,
    Restart,
    Schedule,
    Spawn,
    Spawned,
    Start,
    Stop,
    Tick,
    Undrain,
    Unplaceable,
)
from controller.supervise.machine.states import (
    After,
    Machine,
    MachineMisuse,
    Phase,
    Policy,
    State,
    uptime,
)
from controller.supervise.machine.transitions import step

__all__ = [
    "Action",
    "Adopt",
    "After",
    "Drain",
    "Drained",
    "Emit",
    "Event",
    "Exited",
    "HealthFailed",
    "Healthy",
    "Kill",
    "Machine",
    "MachineMisuse",
    "Phase",
    "Policy",
    "Restart",
    "Schedule",
    "Spawn",
    "Spawned",
    "Start",
    "State",
    "Stop",
    "Tick",
    "Undrain",
    "Unplaceable",
    "step",
    "uptime",
]
