"""Adopting processes that already run instead of starting copies of them: after a restart, the
ones the run dir records (controller/supervise/run_state.py), if still the very process launched
(pid,
start time and command line); at a start, the one already holding the instance's port, if it is
this launch (anything else there is reported, and the start counts as failed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from controller.backends import procfs
from controller.backends.local import ProcessBackend, ProcessRecord, settled
from controller.launch.render import Launch, LaunchSettings, render
from controller.supervise import machine as m
from controller.supervise import placing, run_state
from controller.supervise.clock import Clock
from controller.supervise.run_dir_faults import RunDirFaults, forget_record
from controller.supervise.units import Supervised, Unit

Emit = Callable[[str, str, str | None], None]  # (kind, message, deployment)


def adopt_saved(
    run_dir: Path,
    launch_settings: LaunchSettings,
    policy: m.Policy,
    *,
    backend: ProcessBackend,
    clock: Clock,
    emit: Emit,
    faults: RunDirFaults,
) -> dict[str, Supervised]:
    """Every deployment saved in `run_dir`, each process adopted if it still runs."""
    deployments: dict[str, Supervised] = {}
    for path in run_state.saved_deployments(run_dir):
        try:
            spec, ports, running = run_state.load_deployment(path)
        except (ValueError, KeyError) as exc:
            emit("adopt_failed", f"{path}: {exc}", None)
            continue
        dep = Supervised(spec.name, spec, ports, path.parent, {}, running=running)
        dep.admin_token = run_state.read_admin_token(path.parent)
        dep.placed = placing.load(path.parent, backend)
        dep.revision, revisions, dep.older = run_state.load_revisions(path)
        desired = {launch.name for launch in render(spec, ports, launch_settings)}
        told = run_state.load_in_place(path)
        for launch, revision in _launches(dep, revisions, launch_settings):
            if _not_started_yet(dep, launch, revisions, backend):
                continue
            unit = adopt_unit(
                dep,
                launch,
                policy,
                backend=backend,
                clock=clock,
                emit=emit,
                faults=faults,
                told=told.get(launch.name),
            )
            unit.revision, unit.dropping = revision, launch.name not in desired
            dep.units[launch.name] = unit
        deployments[dep.name] = dep
    return deployments


def _not_started_yet(
    dep: Supervised, launch: Launch, revisions: dict[str, int], backend: ProcessBackend
) -> bool:
    """An instance of the desired revision that the rollout under way had not started when
    the control plane stopped (no revision kept for it, no process recorded): its rollout
    starts it, in its batch, once taken over; never this supervisor on its own."""
    return (
        bool(revisions)
        and not launch.is_proxy
        and launch.name not in revisions
        and backend.read(dep.folder, launch.name) is None
    )


def _launches(
    dep: Supervised, revisions: dict[str, int], settings: LaunchSettings
) -> list[tuple[Launch, int | None]]:
    """Each process as it runs: the desired revision's launch, or, mid-rollout, the launch of
    the older revision it still runs (processes the desired one dropped included)."""
    where = placing.addresses(dep.placed, settings.host)
    desired = render(dep.spec, dep.ports, settings, where)
    out = [(launch, revisions.get(launch.name, dep.revision)) for launch in desired]
    named = {launch.name for launch in desired}
    for number, (spec, ports) in sorted(dep.older.items()):
        runs_it = {n for n, r in revisions.items() if r == number}
        for launch in render(spec, ports, settings, where):
            if launch.name not in runs_it:
                continue
            if launch.name in named:
                out = [(launch, number) if a.name == launch.name else (a, r) for a, r in out]
            else:
                out.append((launch, number))
                named.add(launch.name)
    return out


def adopt_unit(
    dep: Supervised,
    launch: Launch,
    policy: m.Policy,
    *,
    backend: ProcessBackend,
    clock: Clock,
    emit: Emit,
    faults: RunDirFaults,
    told: run_state.Told | None = None,
) -> Unit:
    """The unit of one launch, its machine told whether the process recorded for it lives;
    `told`: the process this launch was told in place, if it was (run_state.load_in_place)."""
    unit = Unit(launch, m.Machine(policy=policy))
    record = backend.read(dep.folder, launch.name)
    if record is None or record.child_pid is None:
        return unit
    restarts = run_state.read_restarts(dep.folder, launch.name)
    alive = backend.running(record)
    if not alive:
        record = settled(backend, dep.folder, launch.name, record)
    unit.record = record if alive else None
    if (
        alive
        and told is not None
        and told.names(record.child_pid, record.child_start_time, record.argv)
    ):
        # Started as something else, it runs what it was told since (a proxy: the
        # instances it was told to list, whatever its revision lists).
        unit.told_in_place = told
        if told.runs is not None:
            unit.launch = replace(launch, argv=list(told.runs))
    elif alive and record.argv and list(record.argv) != list(launch.argv):
        # It runs what an earlier start wanted (a switch cut short): keep that as its
        # launch, so the next start with today's spec restarts it.
        unit.launch = replace(launch, argv=list(record.argv))
    if not alive:
        forget_record(faults, backend, dep.name, dep.folder, launch.name)
    event = m.Adopt(record.child_pid, alive, record.exit_code, restarts)
    unit.machine, actions = m.step(unit.machine, event, clock.now())
    for action in actions:
        if isinstance(action, m.Emit):
            emit(action.kind, f"{dep.name}/{launch.name}: {action.message}", dep.name)
    return unit


def port_held(dep: Supervised, unit: Unit, backend: ProcessBackend, emit: Emit) -> m.Event | None:
    """Never a second copy of a process whose port is held: the event that ends this start
    instead, Spawned if the holder is this very launch (its command line; adopted), else
    Exited with the holder named (a health probe it answers must not make a copy that cannot
    bind RUNNING). None: the port is free, start it."""
    launch, port = unit.launch, unit.launch.http_port
    holders = backend.port_holders(port)
    if not holders:
        return None
    ours = next(
        (h for h in holders if h.pid and procfs.launched_as(list(h.cmdline), launch.argv)),
        None,
    )
    where = f"{dep.name}/{launch.name}"
    if ours is not None and ours.pid is not None:
        unit.record = ProcessRecord(launch.name, ours.pid, ours.start_time, argv=tuple(launch.argv))
        emit(
            "adopted",
            f"{where}: already serving on port {port} as pid {ours.pid}; adopted, "
            "not started a second time",
            dep.name,
        )
        return m.Spawned(ours.pid)
    unit.refusal = (
        f"port {port} is held by {', '.join(h.describe() for h in holders)}; "
        "not starting a second copy"
    )
    emit("port_held", f"{where}: {unit.refusal}", dep.name)
    return m.Exited(None)
