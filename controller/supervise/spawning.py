"""Spawning one supervised process: never a second copy on a held port, on its node (on a
cluster), with a fresh admin token for a proxy, reported back to its machine.

Where: a process whose node is gone is placed again (or made FATAL, saying why no node fits);
a process placed on another node than its launch names gets its launch rendered for that node,
and the running proxy is told (controller/clients/proxy_moves.py), not restarted."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable

from controller.backends.local import ProcessBackend, SpawnError, Where
from controller.clients.proxy_moves import tell_proxy_moved
from controller.launch.placement import Addresses, Node, PlacementError
from controller.launch.registry_expect import expected_registrations
from controller.launch.render import LaunchSettings, render
from controller.supervise import machine as m
from controller.supervise import placing, run_state
from controller.supervise.adoption import port_held
from controller.supervise.run_dir_faults import RunDirFaults, forget_record
from controller.supervise.units import LIVE, Supervised, Unit

log = logging.getLogger("pdctl.supervisor")
Feed = Callable[[Supervised, Unit, m.Event], Awaitable[None]]
Emit = Callable[[str, str, str | None], None]
ADMIN_TOKEN_ENV = "PDCTL_ADMIN_TOKEN"  # what `pdctl proxy --admin-token` reads


async def spawn(
    dep: Supervised,
    unit: Unit,
    backend: ProcessBackend,
    launch_settings: LaunchSettings,
    *,
    feed: Feed,
    emit: Emit,
    addresses: Addresses,
    faults: RunDirFaults,
) -> None:
    name = unit.launch.name
    # A run dir that cannot be written is a fault (an event, the deployment degraded), and
    # the spawn is still tried: the shim reports its process over a pipe.
    forget_record(faults, backend, dep.name, dep.folder, name)
    restarts = unit.machine.restarts
    faults.attempt(
        dep.name,
        str(dep.folder / name / run_state.RESTARTS_FILE),
        lambda: run_state.write_restarts(dep.folder, name, restarts),
    )
    unit.healthy = unit.registered = None
    unit.failed_probes, unit.next_probe = 0, 0.0
    unit.refusal = None
    held = port_held(dep, unit, backend, emit)
    if held is not None:
        await feed(dep, unit, held)
        return
    where = await where_to_spawn(
        dep, unit, backend, launch_settings, feed=feed, emit=emit, addresses=addresses
    )
    if backend.clustered and where is None:
        return  # no node fits: the unit is FATAL, and the event says why
    env = {**unit.launch.env, **unit.launch.handover}
    if unit.launch.is_proxy:
        token = dep.admin_token = secrets.token_urlsafe(32)
        faults.attempt(
            dep.name,
            str(dep.folder / run_state.ADMIN_TOKEN_FILE),
            lambda: run_state.write_admin_token(dep.folder, token),
        )
        env = {**env, ADMIN_TOKEN_ENV: dep.admin_token}
    # The process and its machine learning its pid are one thing: a caller cancelled
    # meanwhile (a rollout aborted, a step past its deadline) must not leave a process that
    # runs with no machine knowing it, holding its ports for good.
    done = asyncio.ensure_future(_spawn_and_report(dep, unit, backend, env, where, feed, emit))
    try:
        await asyncio.shield(done)
    except asyncio.CancelledError:
        done.add_done_callback(_log_failure)
        raise


async def _spawn_and_report(
    dep: Supervised,
    unit: Unit,
    backend: ProcessBackend,
    env: dict[str, str],
    where: Where | None,
    feed: Feed,
    emit: Emit,
) -> None:
    name = unit.launch.name
    try:
        record = await backend.spawn(dep.folder, name, unit.launch.argv, env, where)
    except (SpawnError, OSError) as exc:
        emit("spawn_failed", f"{dep.name}/{name}: {exc}", dep.name)
        await feed(dep, unit, m.Exited(None))
        return
    unit.record = record
    if record.child_pid is None:
        await feed(dep, unit, m.Exited(record.exit_code))
        return
    await feed(dep, unit, m.Spawned(record.child_pid))


def _log_failure(task: asyncio.Future) -> None:
    """A spawn whose caller was cancelled ends unawaited: its failure is logged, not lost."""
    if not task.cancelled() and task.exception() is not None:
        log.error("a spawn went wrong after its caller stopped", exc_info=task.exception())


async def where_to_spawn(
    dep: Supervised,
    unit: Unit,
    backend: ProcessBackend,
    launch_settings: LaunchSettings,
    *,
    feed: Feed,
    emit: Emit,
    addresses: Addresses,
) -> Where | None:
    """The node `unit` is to be spawned on; None on one host, or when no node fits (the unit
    is then FATAL)."""
    if not backend.clustered:
        return None
    name = unit.launch.name
    nodes = await backend.nodes()
    lost = placing.node_lost(dep.placed, name, nodes)
    if lost is not None or dep.placed is None or name not in dep.placed.nodes:
        alive = {n for n, u in dep.units.items() if u.machine.state in LIVE and n != name}
        try:
            dep.placed = await placing.place_deployment(backend, dep.spec, dep.placed, alive)
        except PlacementError as err:
            gone = f"its node {lost.describe()} is gone and " if lost else ""
            field = ".".join(str(p) for p in err.loc)
            fix = f"; fix: store a revision whose {field} fits the cluster, and roll it out"
            await feed(dep, unit, m.Unplaceable(f"{gone}no node fits: {err.message}{fix}"))
            return None
        placing.save(dep.folder, dep.placed)
    if dep.placed is None:  # place_deployment places nothing on one host; clustered here
        return None
    node = dep.placed.nodes[name]
    if unit.launch.address is not None and unit.launch.address != node.address:
        await _moved(dep, name, node, nodes, launch_settings, emit, addresses)
    return placing.where(dep.spec, dep.placed, name)


async def _moved(
    dep: Supervised,
    name: str,
    node: Node,
    nodes: list[Node],
    launch_settings: LaunchSettings,
    emit: Emit,
    addresses: Addresses,
) -> None:
    """`name` runs on `node` from now on: its launch and the proxy's (told, not restarted)."""
    old = dep.units[name].launch
    where = placing.addresses(dep.placed, launch_settings.host)
    for launch in render(dep.spec, dep.ports, launch_settings, where):
        if launch.name == name or launch.is_proxy:
            dep.units[launch.name].launch = launch
    new = dep.units[name].launch
    live = {n.address for n in nodes if n.alive}
    was = f"lost node {old.address}" if old.address not in live else f"node {old.address}"
    emit("replaced", f"{dep.name}/{name}: moved from {was} to {node.describe()}", dep.name)
    if new.is_proxy or old.url == new.url:
        return
    # The MoRIIO proxy is told whom to expect, as the addresses now are.
    fresh = Addresses(addresses.default, {**addresses.by_name, name: node.address})
    expected = expected_registrations(dep.spec, dep.ports, fresh) if new.registers else None
    failed = await tell_proxy_moved(dep.proxy.launch.url, dep.admin_token, old, new, expected)
    if failed:
        emit("proxy_unreachable", f"{dep.name}/{name}: {failed}", dep.name)
