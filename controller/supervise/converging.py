"""How a start's launches reach a deployment's processes (the supervisor's `start`): new ones
are added, ones whose command changed restarted, ones the revision no longer has drained,
stopped and then forgotten, and the ones a rollout's batch leaves alone kept as they run."""

from __future__ import annotations

from dataclasses import replace

from controller.launch.process import Launch
from controller.supervise import machine as m
from controller.supervise.units import LIVE, Supervised, Unit
from controller.supervise.watcher import Watcher


async def converge(
    watch: Watcher,
    dep: Supervised,
    launches: list[Launch],
    revision: int | None,
    only: set[str] | None,
) -> None:
    """Bring `dep`'s processes to `launches` (revision `revision`); `only`: just these (a
    rollout's batch), the others run what they ran."""
    names = {launch.name for launch in launches}
    touched = names | set(dep.units) if only is None else set(only)
    for launch in launches:
        if launch.name in touched:
            await _converge(watch, dep, launch, revision)
        elif launch.name in dep.units:
            unit = dep.units[launch.name]
            if launch.is_proxy:  # who it expects: told at its admin API
                unit.launch = replace(unit.launch, handover=launch.handover)
            if _runs(unit.launch, launch) and not unit.dropping:
                # Left alone, yet it runs what `revision` would: it is at `revision` (so
                # the older revision is not kept, nor expected by the proxy, for it).
                unit.revision = revision
    for unit in list(dep.units.values()):
        if unit.launch.name in touched and unit.launch.name not in names:
            await _drop(watch, dep, unit)


def stamp_kept(dep: Supervised, launches: list[Launch], revision: int) -> bool:
    """A rollout ended with nothing left to converge: each process that runs what `revision`
    would is at `revision` (a rollout with no step never converged it). True when every
    process of `revision` runs it, so the deployment runs `revision`."""
    every = True
    for launch in launches:
        unit = dep.units.get(launch.name)
        if unit is not None and not unit.dropping and _runs(unit.launch, launch):
            unit.revision = revision
        else:
            every = False
    return every


async def _converge(watch: Watcher, dep: Supervised, launch: Launch, revision: int | None) -> None:
    unit = dep.units.get(launch.name)
    if unit is None:
        dep.units[launch.name] = Unit(
            launch, m.Machine(policy=watch.settings.policy), revision=revision
        )
        return
    changed = (unit.launch.argv, unit.launch.env) != (launch.argv, launch.env)
    unit.launch, unit.revision, unit.dropping = launch, revision, False
    # A process that gave up (FATAL) starts afresh: the rollout is the operator's retry.
    if unit.machine.state is m.State.FATAL or (changed and unit.machine.state in LIVE):
        await watch.feed(dep, unit, m.Restart())


async def _drop(watch: Watcher, dep: Supervised, unit: Unit) -> None:
    """Stop a process the revision no longer has (drained first); forgotten once down."""
    unit.dropping = True
    if unit.machine.state is not m.State.STOPPED:
        await watch.feed(dep, unit, m.Stop())
    watch.forget_stopped(dep)


def _runs(now: Launch, wanted: Launch) -> bool:
    """`now` is the very process `wanted` would start (what identifies it; not the handover)."""
    return (now.argv, now.env, now.address) == (wanted.argv, wanted.env, wanted.address)
