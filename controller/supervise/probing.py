"""One round of health and registration probes over a deployment's processes, told to their
machines as events: /health of each process due, whether each instance that registers is in its
proxy's table (and what the proxy refused), and whether a draining instance is idle yet."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from controller.backends.procfs import cpu_demand
from controller.clients.health import Probe, same_instance
from controller.supervise import machine as m
from controller.supervise.clock import Clock
from controller.supervise.units import Supervised, Unit

# How long a local process that keeps using CPU may leave /health unanswered before its silence
# counts: a stalled API server answers within seconds; a livelocked one never does.
STALL_LIMIT_S = 60.0
Feed = Callable[[Supervised, Unit, m.Event], Awaitable[None]]  # one event into a unit's machine
Emit = Callable[[str, str, str | None], None]  # (kind, message, deployment)


async def probe_round(
    dep: Supervised,
    probe: Probe,
    clock: Clock,
    feed: Feed,
    emit: Emit,
    *,
    interval: float,
    failures: int,
) -> None:
    """Probe the processes due (every `interval` s each); `failures` failed probes in a row
    replace a RUNNING process."""
    now = clock.now()
    due = [
        u
        for u in dep.units.values()
        if u.machine.pid is not None
        and u.machine.state in (m.State.STARTING, m.State.RUNNING)
        and now >= u.next_probe
    ]
    registrations = None
    if any(u.launch.registers for u in due) or draining(dep):
        registrations = await probe.proxy_instances(dep.proxy.launch.url, dep.admin_token)
    # All at once: a hung instance holds its probe for the whole timeout, and must not
    # hold up the others' probes by that much each.
    answers = await asyncio.gather(*(probe.healthy(u.launch.url) for u in due))
    for unit, answer in zip(due, answers, strict=True):
        ok = answer is True
        unit.next_probe = now + interval
        if unit.launch.registers:
            if registrations is None and unit.machine.state is m.State.RUNNING:
                # The proxy is down or restarting: that says nothing about a running
                # instance (it registers again once the proxy is back), so /health alone
                # judges it; replacing it would turn a proxy restart into an outage.
                unit.registered = None
            else:
                unit.registered = registrations is not None and any(
                    same_instance(e, unit.launch.url) for e in registrations
                )
                ok = ok and unit.registered
        unit.healthy = ok
        progressed = _made_progress(unit)  # sampled every probe: the next one compares
        stalled = answer is None and progressed
        since = unit.stalled_since
        unit.stalled_since = (now if since is None else since) if stalled else None
        excused = stalled and stall_excused(unit.stalled_since, now)
        if ok:
            unit.failed_probes = 0
            await feed(dep, unit, m.Healthy())
        elif unit.machine.state is m.State.RUNNING and not (
            excused or (answer is None and starving_peer(dep, unit))
        ):
            unit.failed_probes += 1
            if unit.failed_probes >= failures:
                unit.failed_probes = 0
                await feed(dep, unit, m.HealthFailed(f"{failures} probes failed"))
    if registrations is not None:
        await _tell_refusals(dep, probe, clock, emit)
    for unit in draining(dep):
        entry = next((e for e in registrations or [] if same_instance(e, unit.launch.url)), None)
        if registrations is None or entry is None or not entry.get("outstanding_requests"):
            await feed(dep, unit, m.Drained())


async def _tell_refusals(dep: Supervised, probe: Probe, clock: Clock, emit: Emit) -> None:
    """Registrations the proxy refused (a rogue, a mismatch, a malformed field): events."""
    refusals = await probe.proxy_refusals(dep.proxy.launch.url, dep.admin_token)
    for message in dep.refusals.news(refusals or [], clock.now()):
        emit("registry.refused", f"{dep.name}: {message}", dep.name)


def stall_excused(stalled_since: float | None, now: float) -> bool:
    """A silence with CPU progress is excused for STALL_LIMIT_S, then counts (a livelock)."""
    return stalled_since is not None and now - stalled_since < STALL_LIMIT_S


def _made_progress(unit: Unit) -> bool:
    """A local process whose /health timed out but which used CPU, or waited on a run queue
    for it, since its last probe: an API server stalled by a busy engine or a starved host
    (real vLLM on 2 cores went unanswered for 9 s at idle, and for 20 s at a load average of
    10, scheduled too little to use a tick), not a hung one. A stopped (SIGSTOP) or
    deadlocked process does neither. A process on another node is judged by the demand its
    node read with its last record (a Ray actor's state, each second); none read: its silence
    counts (a busy decode on a Ray node was replaced 9 s after it became ready)."""
    pid = unit.machine.pid
    if pid is None:
        return False
    if unit.launch.address is None:
        ticks = cpu_demand(pid)
    else:
        record = unit.record
        ticks = record.cpu_demand if record is not None and record.child_pid == pid else None
    seen, unit.cpu_seen = unit.cpu_seen, (None if ticks is None else (pid, ticks))
    return ticks is not None and seen is not None and seen[0] == pid and ticks > seen[1]


def starving_peer(dep: Supervised, unit: Unit) -> Unit | None:
    """An instance of the same deployment starting on the same node: loading a model takes
    every core it can, so a running neighbour's API server may not answer /health in time.
    Its silence then is not counted (a refusal or an error still is; the start is bounded by
    the start timeout, and a process that dies is seen by its exit)."""
    return next(
        (
            u
            for u in dep.units.values()
            if u is not unit
            and not u.launch.is_proxy
            and u.machine.state is m.State.STARTING
            and u.launch.address == unit.launch.address
        ),
        None,
    )


def draining(dep: Supervised) -> list[Unit]:
    """The processes in the drain phase of a stop, not yet signalled."""
    return [
        u
        for u in dep.units.values()
        if u.machine.state is m.State.STOPPING and u.machine.phase is m.Phase.DRAIN
    ]
