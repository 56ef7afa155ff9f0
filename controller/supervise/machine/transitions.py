"""The transitions of one supervised process's machine: `step(state, event, now)`, one handler
per event type, each edge commented where it is taken. Pure: no I/O and no clock."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import replace
from typing import Any

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
    Spawned,
    Start,
    Stop,
    Tick,
    Undrain,
    Unplaceable,
)
from controller.supervise.machine.moves import fail, sigterm, spawn, terminate
from controller.supervise.machine.states import After, Machine, MachineMisuse, Phase, State


def step(m: Machine, event: Event, now: float) -> tuple[Machine, list[Action]]:
    """One transition. Events that do not apply to the state change nothing."""
    handler = _HANDLERS[type(event)]
    return handler(m, event, now)


def _start(m: Machine, _: Start, now: float) -> tuple[Machine, list[Action]]:
    if m.state in (State.STOPPED, State.EXITED):
        # STOPPED/EXITED --start--> STARTING: spawn, and give it start_timeout to become ready.
        return spawn(replace(m, failures=0), now, "start requested")
    if m.state is State.FATAL:
        # FATAL --start--> STARTING: an operator retries; the failure count starts over.
        return spawn(replace(m, failures=0), now, "start requested after FATAL")
    if m.state is State.STOPPING:
        # STOPPING --start--> STOPPING: finish going down, then come back at once.
        return replace(m, after=After.RESTART), []
    # STARTING / RUNNING / BACKOFF --start--> unchanged: already on its way up.
    return m, []


def _spawned(m: Machine, e: Spawned, now: float) -> tuple[Machine, list[Action]]:
    if m.state is State.STOPPING and m.pid is None:
        # STOPPING --spawned--> STOPPING: stopped while the spawn was in flight; SIGTERM now.
        return replace(m, pid=e.pid), [Kill(signal.SIGTERM), Emit("spawned", f"pid {e.pid}")]
    if m.state is not State.STARTING:
        raise MachineMisuse(f"spawned in state {m.state}")
    # STARTING --spawned--> STARTING: now we know its pid.
    return replace(m, pid=e.pid), [Emit("spawned", f"pid {e.pid}")]


def _healthy(m: Machine, _: Healthy, now: float) -> tuple[Machine, list[Action]]:
    if m.state is not State.STARTING:
        return m, []  # RUNNING stays RUNNING; a late probe in other states means nothing
    # STARTING --healthy--> RUNNING: a successful start resets the failure count, and the
    # proxy may route to it again (it was drained if it crashed or was restarted).
    up = round(now - m.started_at, 3) if m.started_at is not None else 0.0
    return (
        replace(m, state=State.RUNNING, failures=0, ready_at=now, deadline=None),
        [Undrain(), Emit("ready", f"ready after {up} s")],
    )


def _health_failed(m: Machine, e: HealthFailed, now: float) -> tuple[Machine, list[Action]]:
    if m.state is not State.RUNNING:
        return m, []  # while STARTING, failed probes are expected; start_timeout governs
    # RUNNING --health failed--> STOPPING(then BACKOFF): a wedged process is replaced; no
    # drain wait (it serves nothing), straight to SIGTERM.
    return terminate(m, now, After.BACKOFF, f"unhealthy: {e.reason}", drain_first=False)


def _exited(m: Machine, e: Exited, now: float) -> tuple[Machine, list[Action]]:
    gone = replace(m, pid=None, last_exit=e.code, deadline=None, phase=None, after=None)
    code = "unknown status" if e.code is None else f"code {e.code}"
    if m.state is State.STOPPING:
        if m.after is After.RESTART:
            # STOPPING(restart) --exited--> STARTING: an operator restart is not a failure.
            return spawn(gone, now, f"restarting (exited with {code})")
        if m.after is After.BACKOFF:
            # STOPPING(backoff) --exited--> BACKOFF/FATAL: the kill was for a failure.
            return fail(gone, now, f"exited with {code}")
        # STOPPING(stop) --exited--> STOPPED: done.
        return replace(gone, state=State.STOPPED), [Emit("stopped", f"exited with {code}")]
    if m.state is State.STARTING:
        # STARTING --exited--> BACKOFF/FATAL: a failed start.
        return fail(gone, now, f"exited with {code} before it was ready", drain=False)
    if m.state is State.RUNNING:
        if not m.policy.autorestart:
            # RUNNING --exited--> EXITED: restarts are off; stays down, drained in the proxy.
            return replace(gone, state=State.EXITED), [Drain(), Emit("exited", code)]
        # RUNNING --exited--> BACKOFF: a crash. The run was a success (failures were reset
        # when it became ready), so this is failure 1: restart after the base delay.
        return fail(gone, now, f"crashed with {code}")
    return m, []  # STOPPED / BACKOFF / EXITED / FATAL have no process: a stale report


def _unplaceable(m: Machine, e: Unplaceable, now: float) -> tuple[Machine, list[Action]]:
    if m.state is not State.STARTING or m.pid is not None:
        return m, []
    # STARTING(no pid) --unplaceable--> FATAL: retrying cannot help until the cluster changes.
    return replace(m, state=State.FATAL, deadline=None), [Emit("fatal", e.reason)]


def _drained(m: Machine, _: Drained, now: float) -> tuple[Machine, list[Action]]:
    if m.state is State.STOPPING and m.phase is Phase.DRAIN:
        # STOPPING(drain) --drained--> STOPPING(term): nothing in flight, SIGTERM now.
        return sigterm(m, now, "drained")
    return m, []


def _stop(m: Machine, _: Stop, now: float) -> tuple[Machine, list[Action]]:
    if m.state is State.RUNNING:
        # RUNNING --stop--> STOPPING(drain): the proxy sends it nothing new first.
        return terminate(m, now, After.STOP, "stop requested", drain_first=True)
    if m.state is State.STARTING:
        if m.pid is None:
            # STARTING without a pid yet: the spawn is still in flight; SIGTERM once known.
            return replace(
                m,
                state=State.STOPPING,
                phase=Phase.TERM,
                after=After.STOP,
                deadline=now + m.policy.term_timeout,
            ), [Schedule(now + m.policy.term_timeout), Emit("stopping", "stop requested")]
        # STARTING --stop--> STOPPING(term): it serves nothing yet, no drain.
        return terminate(m, now, After.STOP, "stop requested", drain_first=False)
    if m.state is State.STOPPING:
        # STOPPING --stop--> STOPPING: keep going down, and stay down.
        return replace(m, after=After.STOP), []
    if m.state in (State.BACKOFF, State.EXITED, State.FATAL):
        # BACKOFF/EXITED/FATAL --stop--> STOPPED: no process to stop; cancel the retry.
        return (
            replace(m, state=State.STOPPED, deadline=None),
            [Emit("stopped", f"stopped from {m.state}")],
        )
    return m, []  # STOPPED: already


def _restart(m: Machine, _: Restart, now: float) -> tuple[Machine, list[Action]]:
    if m.state in (State.RUNNING, State.STARTING) and m.pid is not None:
        # RUNNING/STARTING --restart--> STOPPING(restart): drain, stop, spawn again.
        return terminate(
            m, now, After.RESTART, "restart requested", drain_first=m.state is State.RUNNING
        )
    if m.state is State.STARTING:
        # STARTING(no pid) --restart--> STOPPING(term, restart): the spawn is still in flight;
        # SIGTERM once its pid is known, spawn again after its exit. Spawning now would start
        # a second copy and orphan the first, which keeps the ports.
        deadline = now + m.policy.term_timeout
        return replace(
            m, state=State.STOPPING, phase=Phase.TERM, after=After.RESTART, deadline=deadline
        ), [Schedule(deadline), Emit("stopping", "restart requested while starting")]
    if m.state is State.STOPPING:
        return replace(m, after=After.RESTART), []
    # STOPPED/BACKOFF/EXITED/FATAL --restart--> STARTING: nothing to stop; start afresh.
    return spawn(replace(m, failures=0), now, "restart requested")


def _tick(m: Machine, _: Tick, now: float) -> tuple[Machine, list[Action]]:
    if m.deadline is None or now < m.deadline:
        return m, []  # not due (or a stale timer)
    if m.state is State.BACKOFF:
        # BACKOFF --backoff elapsed--> STARTING: try again.
        return spawn(m, now, f"retry {m.failures} after backoff")
    if m.state is State.STARTING:
        # STARTING --start timeout--> STOPPING(backoff): not ready in time counts as failed.
        return terminate(
            m, now, After.BACKOFF, f"not ready after {m.policy.start_timeout} s", drain_first=False
        )
    if m.state is State.STOPPING:
        if m.phase is Phase.DRAIN:
            # STOPPING(drain) --drain timeout--> STOPPING(term): in-flight requests had their
            # time; SIGTERM (vLLM finishes or aborts what is left).
            return sigterm(m, now, f"drain timeout ({m.policy.drain_timeout} s)")
        if m.phase is Phase.TERM:
            if m.pid is None:
                # Spawn never reported a pid; nothing to signal. The shell reports the exit.
                return replace(m, phase=Phase.KILL, deadline=now + m.policy.kill_timeout), [
                    Schedule(now + m.policy.kill_timeout)
                ]
            # STOPPING(term) --stop timeout--> STOPPING(kill): SIGKILL the whole group.
            deadline = now + m.policy.kill_timeout
            return (
                replace(m, phase=Phase.KILL, deadline=deadline),
                [
                    Kill(signal.SIGKILL),
                    Schedule(deadline),
                    Emit("killed", f"no exit {m.policy.term_timeout} s after SIGTERM: SIGKILL"),
                ],
            )
        # STOPPING(kill) --kill timeout--> FATAL: a process that survives SIGKILL (stuck in
        # the kernel, D state) needs a human.
        return (
            replace(m, state=State.FATAL, deadline=None, phase=None, after=None),
            [Emit("fatal", f"pid {m.pid} did not exit after SIGKILL")],
        )
    return m, []


def _adopt(m: Machine, e: Adopt, now: float) -> tuple[Machine, list[Action]]:
    if m.state is not State.STOPPED:
        raise MachineMisuse(f"adopt in state {m.state}")
    if e.alive:
        # STOPPED --adopt(alive)--> STARTING: ours from before; not spawned again, health
        # decides when it is RUNNING (at once if it answers).
        deadline = now + m.policy.start_timeout
        return (
            replace(
                m,
                state=State.STARTING,
                pid=e.pid,
                started_at=now,
                spawned=True,
                restarts=e.restarts,
                deadline=deadline,
            ),
            [Schedule(deadline), Emit("adopted", f"pid {e.pid} still running")],
        )
    # STOPPED --adopt(dead)--> EXITED: it died while nobody watched; its files are cleaned.
    code = "unknown status" if e.exit_code is None else f"code {e.exit_code}"
    return (
        replace(
            m,
            state=State.EXITED,
            pid=None,
            last_exit=e.exit_code,
            spawned=True,
            restarts=e.restarts,
        ),
        [Emit("exited", f"pid {e.pid} found dead ({code})")],
    )


# each handler takes its own event type: the dict's key says which
Handler = Callable[[Machine, Any, float], tuple[Machine, list[Action]]]
_HANDLERS: dict[type, Handler] = {
    Start: _start,
    Spawned: _spawned,
    Healthy: _healthy,
    HealthFailed: _health_failed,
    Exited: _exited,
    Drained: _drained,
    Stop: _stop,
    Restart: _restart,
    Tick: _tick,
    Adopt: _adopt,
    Unplaceable: _unplaceable,
}
