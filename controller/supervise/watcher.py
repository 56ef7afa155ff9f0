"""The supervisor's passes (controller/supervise/supervisor.py is its facade): every
`poll_interval` each deployment's processes are observed (exits, health, stale peers, time),
their machines fed what was seen, desired and actual reconciled, and the actions that come
back performed (spawn under the shim, signal the group, drain in the proxy, record events).

`Watcher` holds what a pass needs and none of the facade's calls: the deployments (the very
dict the supervisor keeps), the process backend, the probe, the clock and the run dir's faults.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from controller.backends.local import ProcessBackend, ProcessRecord, settled
from controller.clients.health import Probe
from controller.launch.placement import Addresses
from controller.launch.render import LaunchSettings
from controller.spec.redact import redact_text
from controller.supervise import machine as m
from controller.supervise import run_state, spawning
from controller.supervise.clock import Clock
from controller.supervise.probing import probe_round
from controller.supervise.run_dir_faults import RunDirFaults, forget_record
from controller.supervise.settings import SupervisorSettings
from controller.supervise.stale_peers import StaleWatch, check
from controller.supervise.units import IDLE, LIVE, Supervised, Unit, note_start

log = logging.getLogger("pdctl.supervisor")
Emit = Callable[[str, str, str | None], None]  # (kind, message, deployment)
StartSample = Callable[[str, str, float], None]  # (deployment, group, seconds)
_FAILURES = ("backoff", "fatal", "exited")  # events that quote the process's last log line
LAST_WORDS_CHARS = 240


def engine_addresses(dep: Supervised, launch: LaunchSettings) -> Addresses:
    """Where each engine of `dep` listens (what its MoRIIO registrations name)."""
    default = launch.bind_host or launch.host
    by_name = dep.placed.addresses(launch.host).by_name if dep.placed else {}
    return Addresses(default, dict(by_name))


class Watcher:
    """Runs the passes over `deployments`; `feed`, `reconcile`, `save` and `forget_stopped`
    are also what the supervisor's facade changes them with."""

    def __init__(
        self,
        settings: SupervisorSettings,
        deployments: dict[str, Supervised],
        backend: ProcessBackend,
        probe: Probe,
        clock: Clock,
        faults: RunDirFaults,
        emit: Emit,
        on_start_sample: StartSample,
    ) -> None:
        self.settings, self.deployments = settings, deployments
        self.backend, self.probe, self.clock, self.faults = backend, probe, clock, faults
        self.emit, self.on_start_sample = emit, on_start_sample
        # per deployment: controller/supervise/stale_peers.py
        self.stale: dict[str, StaleWatch] = {}

    async def run(self) -> None:
        """Pass after pass, until cancelled."""
        while True:
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception:  # the supervisor must outlive one bad pass; it is logged
                log.exception("supervisor pass failed")
            await self.clock.sleep(self.settings.poll_interval)

    async def poll(self) -> None:
        """One pass over every deployment: observe, then reconcile."""
        await self.backend.refresh()
        self.faults.retry()
        for dep in list(self.deployments.values()):
            # A failure of our own I/O not caught where it happened: a fault of this
            # deployment (an event, degraded), never a pass that stops for every deployment.
            key = f"{dep.folder} (a supervisor pass)"
            try:
                await self._pass(dep)
            except OSError as exc:
                self.faults.attempt(dep.name, key, _raise(exc))  # until a pass works
            else:
                self.faults.clear(key)

    async def _pass(self, dep: Supervised) -> None:
        await self._observe_exits(dep)
        await probe_round(
            dep,
            self.probe,
            self.clock,
            self.feed,
            self.emit,
            interval=self.settings.health_interval,
            failures=self.settings.health_failures,
        )
        watch = self.stale.setdefault(dep.name, StaleWatch())
        for decode, why in await check(dep, watch, self.probe, self.clock.now()):
            self.emit("stale_peer", f"{dep.name}/{decode}: restarting: {why}", dep.name)
            await self.feed(dep, dep.units[decode], m.Restart())
        for unit in list(dep.units.values()):
            await self.feed(dep, unit, m.Tick())
        for unit in list(dep.units.values()):
            await self._pay_undrain(dep, unit)
        await self.reconcile(dep)

    async def _observe_exits(self, dep: Supervised) -> None:
        for unit in dep.units.values():
            if unit.machine.state not in LIVE or unit.machine.pid is None:
                continue
            record = self._current(dep, unit)
            if record is None or record.child_pid != unit.machine.pid:
                continue  # not ours (yet)
            unit.record = record
            if not self.backend.running(record):
                record = settled(self.backend, dep.folder, unit.launch.name, record)
                code = record.exit_code if record.exited else None
                if record.lost:
                    # Its node gone (the event names it), or only its keeper on the node.
                    kind = "node_lost" if record.node_lost else "keeper_lost"
                    self.emit(kind, f"{dep.name}/{unit.launch.name}: {record.lost}", dep.name)
                forget_record(self.faults, self.backend, dep.name, dep.folder, unit.launch.name)
                unit.healthy = unit.registered = None
                await self.feed(dep, unit, m.Exited(code))

    async def reconcile(self, dep: Supervised) -> None:
        """Desired vs actual, in start order (proxy, then instances) or stop order (reverse)."""
        proxy = dep.proxy
        if dep.running:
            if proxy.machine.state in (m.State.STOPPED, m.State.EXITED):
                await self.feed(dep, proxy, m.Start())
            if proxy.machine.state is m.State.RUNNING:
                for unit in dep.instances():
                    if dep.units.get(unit.launch.name) is not unit:
                        # Forgotten while this pass awaited a spawn before it (a rollback
                        # dropped it): starting it now would run a process nobody tracks.
                        continue
                    if unit.dropping:
                        if unit.machine.state is m.State.EXITED:
                            await self.feed(dep, unit, m.Stop())
                    elif unit.machine.state in (m.State.STOPPED, m.State.EXITED):
                        await self.feed(dep, unit, m.Start())
                self.forget_stopped(dep)
            return
        for unit in dep.instances():
            if unit.machine.state not in (m.State.STOPPED,):
                await self.feed(dep, unit, m.Stop())
        if all(u.machine.state is m.State.STOPPED for u in dep.instances()):
            await self.feed(dep, proxy, m.Stop())
            await self.feed(dep, proxy, m.Drained())  # nothing routes through it any more

    def forget_stopped(self, dep: Supervised) -> None:
        """Forget the dropped processes that are down, and their records."""
        gone = [n for n, u in dep.units.items() if u.dropping and u.machine.state in IDLE]
        for name in gone:
            del dep.units[name]
            forget_record(self.faults, self.backend, dep.name, dep.folder, name)
        if gone:
            dep.prune_older()
            self.save(dep)

    def save(self, dep: Supervised) -> None:
        """Record `dep` as it is wanted now (tried again each pass until it can be)."""

        def write() -> None:
            run_state.save_deployment(
                dep.folder,
                dep.spec,
                dep.ports,
                dep.revision,
                dep.unit_revisions(),
                dep.older,
                dep.told_in_place(),
            )
            if not dep.running:
                run_state.save_stopped(dep.folder)

        self.faults.attempt(dep.name, str(dep.folder / run_state.DEPLOYMENT_FILE), write)

    # Performing actions ------------------------------------------------------------------

    async def feed_each(self, dep: Supervised, units: list[Unit], event: m.Event) -> None:
        for unit in units:
            await self.feed(dep, unit, event)

    async def feed(self, dep: Supervised, unit: Unit, event: m.Event) -> None:
        """Step `unit`'s machine with `event`, then perform what it asks."""
        before = unit.machine.state
        unit.machine, actions = m.step(unit.machine, event, self.clock.now())
        if unit.machine.state is not before:
            log.info("%s/%s: %s -> %s", dep.name, unit.launch.name, before, unit.machine.state)
            samples = len(unit.start_samples)
            note_start(unit, before, self.clock.now())
            if len(unit.start_samples) > samples:
                group = unit.launch.group or ""
                self.on_start_sample(dep.name, group, unit.start_samples[-1])
        for action in actions:
            await self._perform(dep, unit, action)

    async def _perform(self, dep: Supervised, unit: Unit, action: m.Action) -> None:
        name = unit.launch.name
        if isinstance(action, m.Spawn):
            unit.timing_start = True
            await self._spawn(dep, unit)
        elif isinstance(action, m.Kill):
            record = self._current(dep, unit)
            if record is not None:
                self.backend.signal(record, action.signal)
        elif isinstance(action, m.Drain):
            unit.undrain_owed = False
            if not unit.launch.is_proxy and dep.proxy.machine.state is m.State.RUNNING:
                await self.probe.set_draining(
                    dep.proxy.launch.url, dep.admin_token, unit.launch.url, True
                )
        elif isinstance(action, m.Undrain):
            unit.undrain_owed = not unit.launch.is_proxy
            await self._pay_undrain(dep, unit)
        elif isinstance(action, m.Emit):
            message = action.message
            if action.kind in _FAILURES:
                message += f"; {unit.refusal}" if unit.refusal else self._last_words(dep, name)
            self.emit(action.kind, f"{dep.name}/{name}: {message}", dep.name)
        # Schedule: every pass ticks every machine, so deadlines fire within poll_interval.

    async def _pay_undrain(self, dep: Supervised, unit: Unit) -> None:
        """Tell the proxy to route to a ready `unit` again. Until it is told, the unit stays
        owed: a proxy that was down, still starting (adopted after a restart of
        `pdctl serve`, it keeps the drains it had) or that did not answer would otherwise
        leave a serving instance drained for good."""
        ready = unit.machine.state is m.State.RUNNING
        if not (unit.undrain_owed and ready and dep.proxy.machine.state is m.State.RUNNING):
            return
        if await self.probe.set_draining(
            dep.proxy.launch.url, dep.admin_token, unit.launch.url, False
        ):
            unit.undrain_owed = False

    async def _spawn(self, dep: Supervised, unit: Unit) -> None:
        await spawning.spawn(
            dep,
            unit,
            self.backend,
            self.settings.launch,
            feed=self.feed,
            emit=self.emit,
            addresses=engine_addresses(dep, self.settings.launch),
            faults=self.faults,
        )

    def _current(self, dep: Supervised, unit: Unit) -> ProcessRecord | None:
        """The record of the process `unit` runs now: its state file's, unless that names
        another process (a file the run dir would not let the shim rewrite), then the one
        kept in memory since its spawn; never a stale file's dead pid."""
        record = self._read(dep, unit.launch.name)
        if record is not None and record.child_pid == unit.machine.pid:
            return record
        return unit.record or record

    def _read(self, dep: Supervised, name: str) -> ProcessRecord | None:
        """The state file of `name`, None if it cannot be read (the process is then judged
        by the record kept in memory, and by what runs)."""
        try:
            return self.backend.read(dep.folder, name)
        except OSError as exc:
            log.warning("%s/%s: state file unreadable: %s", dep.name, name, exc)
            return None

    def _last_words(self, dep: Supervised, name: str) -> str:
        """What a failed process said last, so the event log tells an operator why."""
        lines = [line for line in self.backend.log_tail(dep.folder, name, 5) if line.strip()]
        if not lines:
            return ""
        last = redact_text(lines[-1].strip())
        return f'; its last log line: "{last[:LAST_WORDS_CHARS]}"'


def _raise(exc: OSError) -> Callable[[], None]:
    """A write that fails as `exc` did (a fault caught where it was not foreseen)."""

    def fail() -> None:
        raise exc

    return fail
