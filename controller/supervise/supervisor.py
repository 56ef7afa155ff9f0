"""The asyncio shell around controller/supervise/machine.py: it feeds each process's machine the
events it
observes (exits, health, registration, time) and performs the actions that come back (spawn
under the shim, signal the group, drain in the proxy, record events).

Seams: a process backend (controller/backends/local.py), an HTTP probe
(controller/clients/health.py)
and a clock; tests pass fakes and drive `poll()` themselves. Deployments live in the run dir
(controller/supervise/run_state.py, plus one directory per process), so a new supervisor on the same
run dir adopts what still runs and cleans up what died: no orphans, no duplicates
(controller/supervise/adoption.py). Health and registration probes are
controller/supervise/probing.py's.

The run dir is made absolute once, here, and handed to every shim as such: a relative one would
otherwise mean one directory to us and another to a shim started elsewhere. Files in it are
0600 in 0700 directories (controller/backends/private_files.py). A process is adopted only if it is
the
one launched (pid, start time and command line); an instance whose port is already held is
never started twice: its own process found there is adopted, anything else is reported.

Each proxy gets a fresh admin token at start, in its environment (PDCTL_ADMIN_TOKEN; argv is
world-readable in /proc), kept in the run dir for a later supervisor, never in an event or log.

Start order: the proxy first (MoRIIO instances register with it; the NIXL proxy takes the
instances' URLs by flag and health-checks them), then every instance. Stop: instances (drain
in the proxy, SIGTERM, SIGKILL after a deadline), then the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from controller.backends import private_files
from controller.backends.local import ProcessBackend, ProcessRecord, ShimBackend, settled
from controller.clients.health import HttpProbe, Probe
from controller.launch.placement import Addresses, Node, PlacementError
from controller.launch.ports import AllocatedPorts
from controller.launch.process import Launch
from controller.launch.render import LaunchSettings, render
from controller.spec.deployment import DeploymentSpec
from controller.spec.redact import redact_text
from controller.supervise import machine as m
from controller.supervise import placing, run_state, spawning
from controller.supervise.adoption import adopt_saved
from controller.supervise.clock import Clock, SystemClock
from controller.supervise.probing import probe_round
from controller.supervise.run_dir_faults import Fault, RunDirFaults, forget_record
from controller.supervise.stale_peers import StaleWatch, cancel_checks, check
from controller.supervise.units import IDLE, LIVE, Supervised, Unit, describe, note_start
from domain.errors import NotFound, SpecInvalid
from domain.names import did_you_mean

log = logging.getLogger("pdctl.supervisor")
EventSink = Callable[[str, str, str, str | None], None]  # (actor, kind, message, deployment)
ACTOR = "supervisor"
_FAILURES = ("backoff", "fatal", "exited")  # events that quote the process's last log line
LAST_WORDS_CHARS = 240


class SupervisorError(NotFound):
    """A facade call that cannot be done: no such supervised deployment or instance (404)."""


@dataclass(frozen=True, slots=True)
class SupervisorSettings:
    run_dir: Path
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    policy: m.Policy = field(default_factory=m.Policy)
    poll_interval: float = 0.2  # exits, deadlines, drains
    health_interval: float = 1.0  # /health probes per process
    health_failures: int = 3  # failed probes in a row before a RUNNING process is replaced

    def __post_init__(self) -> None:
        # Once, at start: relative to the directory `pdctl serve` was started from.
        object.__setattr__(self, "run_dir", Path(self.run_dir).expanduser().absolute())


class Supervisor:
    """Runs deployments' processes. Build it, `await open()`, call the facade, `await close()`
    (which leaves every process running: a later supervisor adopts them)."""

    def __init__(
        self,
        settings: SupervisorSettings,
        backend: ProcessBackend | None = None,
        probe: Probe | None = None,
        clock: Clock | None = None,
        on_event: EventSink | None = None,
    ) -> None:
        self.settings = settings
        self.backend = backend or ShimBackend()
        self.probe = probe or HttpProbe()
        self.clock = clock or SystemClock()
        self.on_event = on_event or (lambda actor, kind, message, deployment: None)
        self.deployments: dict[str, Supervised] = {}
        # (deployment, group, seconds): a start measured, for a store that keeps it.
        self.on_start_sample: Callable[[str, str, float], None] | None = None
        self._stale: dict[
            str, StaleWatch
        ] = {}  # per deployment: controller/supervise/stale_peers.py
        self._task: asyncio.Task | None = None
        # Its own failed writes to the run dir: events and a degraded deployment, not a
        # stopped supervisor (controller/supervise/run_dir_faults.py).
        self.faults = RunDirFaults(self._emit)
        run_dir = settings.run_dir
        self.faults.attempt(None, str(run_dir), lambda: private_files.private_dir(run_dir))
        self.deployments.update(
            adopt_saved(
                settings.run_dir,
                settings.launch,
                settings.policy,
                backend=self.backend,
                clock=self.clock,
                emit=self._emit,
                faults=self.faults,
            )
        )

    # Facade (the REST API calls these) ---------------------------------------------------

    async def open(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="pdctl-supervisor")

    async def close(self) -> None:
        """Stop supervising; the processes keep running."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await asyncio.gather(*(cancel_checks(w) for w in self._stale.values()))
        await self.probe.aclose()

    async def start(
        self,
        name: str,
        spec: DeploymentSpec,
        ports: AllocatedPorts,
        revision: int | None = None,
        only: set[str] | None = None,
    ) -> None:
        """Want `name` running as `spec` (revision `revision`): processes whose command
        changed are restarted, new ones started, ones `spec` no longer has stopped and then
        forgotten. `only`: converge just these processes (a rollout's batch); the others run
        what they ran. SpecInvalid (nothing changes) if a process can be placed on no node."""
        dep = self.deployments.get(name)
        alive = {n for n, u in dep.units.items() if u.machine.state in LIVE} if dep else set()
        try:
            placed = await placing.place_deployment(
                self.backend, spec, dep.placed if dep else None, alive
            )
        except PlacementError as err:
            raise SpecInvalid.at(err.loc, err.message) from None
        if dep is not None:
            placed = placing.keep_dropped(placed, dep.placed, set(dep.units))
        launches = render(spec, ports, self.settings.launch, self._addresses(placed))
        folder = self.settings.run_dir / name
        self.faults.attempt(name, str(folder), lambda: private_files.private_dir(folder))
        if dep is None:
            dep = Supervised(name, spec, ports, folder, {})
            self.deployments[name] = dep
        if dep.revision is not None and dep.revision != revision:
            dep.older[dep.revision] = (dep.spec, dep.ports)
        dep.spec, dep.ports, dep.running, dep.placed = spec, ports, True, placed
        dep.revision = revision
        names = {launch.name for launch in launches}
        dep.forget_dropped(names)
        self.faults.attempt(
            name, str(folder / run_state.PLACEMENT_FILE), lambda: placing.save(folder, placed)
        )
        touched = names | set(dep.units) if only is None else set(only)
        for launch in launches:
            if launch.name in touched:
                await self._converge(dep, launch, revision)
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
                await self._drop(dep, unit)
        dep.prune_older()
        self._save(dep)
        self._emit("start", f"{name}: start requested", name)
        await self._reconcile(dep)

    async def _converge(self, dep: Supervised, launch: Launch, revision: int | None) -> None:
        unit = dep.units.get(launch.name)
        if unit is None:
            dep.units[launch.name] = Unit(
                launch, m.Machine(policy=self.settings.policy), revision=revision
            )
            return
        changed = (unit.launch.argv, unit.launch.env) != (launch.argv, launch.env)
        unit.launch, unit.revision, unit.dropping = launch, revision, False
        # A process that gave up (FATAL) starts afresh: the rollout is the operator's retry.
        if unit.machine.state is m.State.FATAL or (changed and unit.machine.state in LIVE):
            await self._feed(dep, unit, m.Restart())

    async def _drop(self, dep: Supervised, unit: Unit) -> None:
        """Stop a process the revision no longer has (drained first); forgotten once down."""
        unit.dropping = True
        if unit.machine.state is not m.State.STOPPED:
            await self._feed(dep, unit, m.Stop())
        self._forget_stopped(dep)

    def _forget_stopped(self, dep: Supervised) -> None:
        gone = [n for n, u in dep.units.items() if u.dropping and u.machine.state in IDLE]
        for name in gone:
            del dep.units[name]
            forget_record(self.faults, self.backend, dep.name, dep.folder, name)
        if gone:
            dep.prune_older()
            self._save(dep)

    def _save(self, dep: Supervised) -> None:
        """Record `dep` as it is wanted now (tried again each pass until it can be)."""

        def write() -> None:
            run_state.save_deployment(
                dep.folder, dep.spec, dep.ports, dep.revision, dep.unit_revisions(), dep.older
            )
            if not dep.running:
                run_state.save_stopped(dep.folder)

        self.faults.attempt(dep.name, str(dep.folder / run_state.DEPLOYMENT_FILE), write)

    def keep_launch(self, name: str, process: str, spec: DeploymentSpec) -> None:
        """`process` runs `spec`'s launch from now on, without a restart: what it was told at
        its admin API (the instances a proxy lists) is what a later restart starts it with."""
        dep = self._deployment(name)
        unit = self._unit(dep, process)
        for launch in render(spec, dep.ports, self.settings.launch, self._addresses(dep.placed)):
            if launch.name == process:
                unit.launch, unit.revision = launch, dep.revision
        self._save(dep)

    def keep_all(self, name: str, spec: DeploymentSpec, revision: int | None) -> None:
        """Every process runs `spec` (revision `revision`) from now on, without a restart:
        what changed was changed in place (a runtime role move), so a later restart starts
        each as it serves now."""
        dep = self._deployment(name)
        for launch in render(spec, dep.ports, self.settings.launch, self._addresses(dep.placed)):
            unit = dep.units.get(launch.name)
            if unit is not None:
                unit.launch, unit.revision = launch, revision
        if dep.revision is not None and dep.revision != revision:
            dep.older[dep.revision] = (dep.spec, dep.ports)
        dep.spec, dep.revision = spec, revision
        dep.prune_older()
        self._save(dep)

    def launches(self, name: str, spec: DeploymentSpec, ports: AllocatedPorts) -> list[Launch]:
        """What `spec` would run, where processes run now (new ones as if on this host)."""
        dep = self.deployments.get(name)
        return render(
            spec, ports, self.settings.launch, self._addresses(dep.placed if dep else None)
        )

    async def placed_launches(
        self, name: str, spec: DeploymentSpec, ports: AllocatedPorts
    ) -> list[Launch]:
        """What `spec` would run, placed as a start would place it now (running processes
        keep their node); SpecInvalid naming the field when a process fits on no node."""
        dep = self.deployments.get(name)
        if dep is None or not self.backend.clustered:
            return self.launches(name, spec, ports)
        alive = {n for n, u in dep.units.items() if u.machine.state in LIVE}
        try:
            placed = await placing.place_deployment(self.backend, spec, dep.placed, alive)
        except PlacementError as err:
            raise SpecInvalid.at(err.loc, err.message) from None
        return render(spec, ports, self.settings.launch, self._addresses(placed))

    def running(self, name: str) -> dict[str, Any]:
        """Each process as it runs: its launch, state, health and revision."""
        dep = self._deployment(name)
        return {
            n: (u.launch, u.machine.state.value, u.healthy, u.revision)
            for n, u in dep.units.items()
            if not u.dropping or u.machine.state in LIVE
        }

    async def stop(self, name: str, wait: float | None = None) -> None:
        """Want `name` stopped; with `wait`, return once everything is down (or raise)."""
        dep = self._deployment(name)
        dep.running = False
        self._save(dep)
        self._emit("stop", f"{name}: stop requested", name)
        await self._reconcile(dep)
        if wait is not None:
            await self.wait_for(
                name, lambda units: all(u["state"] in IDLE for u in units), wait, "stopped"
            )

    async def restart(self, name: str, instance: str | None = None) -> None:
        dep = self._deployment(name)
        units = dep.instances() if instance is None else [self._unit(dep, instance)]
        for unit in units:
            await self._feed(dep, unit, m.Restart())

    def admin_token(self, name: str) -> str | None:
        """The bearer token of `name`'s proxy's admin API (None: it was started without)."""
        return self._deployment(name).admin_token

    def status(self, name: str) -> list[dict[str, Any]]:
        """Each process's row; `degraded` says why the deployment is (its run dir cannot be
        written), on every row, None when it is not."""
        dep = self._deployment(name)
        degraded = "; ".join(f.describe() for f in self.degraded(name)) or None
        return [
            {**describe(dep, u, self.clock.now(), self.clock.wall()), "degraded": degraded}
            for u in dep.units.values()
        ]

    def degraded(self, name: str) -> list[Fault]:
        """The run-dir writes that fail now for `name` (none: it is not degraded)."""
        return self.faults.of(name)

    def start_times(self, name: str) -> dict[str, list[float]]:
        """Measured starts (spawn to ready, seconds) of `name`'s instances, by group."""
        out: dict[str, list[float]] = {}
        for unit in self._deployment(name).instances():
            out.setdefault(unit.launch.group or "", []).extend(unit.start_samples)
        return out

    def log_tail(self, name: str, instance: str, lines: int = 100) -> list[str]:
        """The last lines of a process's output, secrets masked (they are shown to people)."""
        dep = self._deployment(name)
        self._unit(dep, instance)
        return [redact_text(line) for line in self.backend.log_tail(dep.folder, instance, lines)]

    def preview(self, spec: DeploymentSpec, ports: AllocatedPorts) -> dict[str, dict[str, Any]]:
        dep = self.deployments.get(spec.name)
        where = self._addresses(dep.placed if dep else None)
        return {
            launch.name: launch.preview()
            for launch in render(spec, ports, self.settings.launch, where)
        }

    def proxy_url(self, name: str) -> str | None:
        """Where `name`'s proxy answers (its node's address on a cluster); None if unknown."""
        dep = self.deployments.get(name)
        return dep.proxy.launch.url if dep is not None and "proxy" in dep.units else None

    def engine_addresses(self, name: str) -> Addresses:
        """Where each engine of `name` listens (what its MoRIIO registrations name)."""
        dep = self._deployment(name)
        default = self.settings.launch.bind_host or self.settings.launch.host
        by_name = dep.placed.addresses(self.settings.launch.host).by_name if dep.placed else {}
        return Addresses(default, dict(by_name))

    async def nodes(self) -> list[Node]:
        """The nodes processes may be placed on, as the backend sees them now."""
        return await self.backend.nodes()

    def _addresses(self, placed: placing.Placed | None) -> Addresses | None:
        return placing.addresses(placed, self.settings.launch.host)

    async def wait_for(
        self,
        name: str,
        predicate: Callable[[list[dict[str, Any]]], bool],
        timeout: float,
        what: str = "condition",
    ) -> list[dict[str, Any]]:
        """Poll status until `predicate` holds; TimeoutError after `timeout` seconds."""
        deadline = self.clock.now() + timeout
        while True:
            units = self.status(name)
            if predicate(units):
                return units
            if self.clock.now() >= deadline:
                raise TimeoutError(
                    f"{name}: not {what} after {timeout} s: "
                    f"{[(u['name'], u['state']) for u in units]}"
                    + self._tails_of_failed(name, units)
                )
            await self.clock.sleep(self.settings.poll_interval)

    def _tails_of_failed(self, name: str, units: list[dict[str, Any]], lines: int = 8) -> str:
        """The last log lines of every unit that is not running: why it failed, in its words."""
        parts = []
        for unit in units:
            if unit["state"] != "RUNNING":
                tail = self.log_tail(name, unit["name"], lines)
                parts.append(
                    f"\n--- {unit['name']} ({unit['state']}), last log lines:\n" + "\n".join(tail)
                )
        return "".join(parts)

    async def wait_running(self, name: str, timeout: float) -> list[dict[str, Any]]:
        return await self.wait_for(
            name, lambda us: all(u["state"] == "RUNNING" for u in us), timeout, "running"
        )

    # The loop ----------------------------------------------------------------------------

    async def _loop(self) -> None:
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
            self._feed,
            self._emit,
            interval=self.settings.health_interval,
            failures=self.settings.health_failures,
        )
        watch = self._stale.setdefault(dep.name, StaleWatch())
        for decode, why in await check(dep, watch, self.probe, self.clock.now()):
            self._emit("stale_peer", f"{dep.name}/{decode}: restarting: {why}", dep.name)
            await self._feed(dep, dep.units[decode], m.Restart())
        for unit in list(dep.units.values()):
            await self._feed(dep, unit, m.Tick())
        await self._reconcile(dep)

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
                    self._emit(kind, f"{dep.name}/{unit.launch.name}: {record.lost}", dep.name)
                forget_record(self.faults, self.backend, dep.name, dep.folder, unit.launch.name)
                unit.healthy = unit.registered = None
                await self._feed(dep, unit, m.Exited(code))

    async def _reconcile(self, dep: Supervised) -> None:
        """Desired vs actual, in start order (proxy, then instances) or stop order (reverse)."""
        proxy = dep.proxy
        if dep.running:
            if proxy.machine.state in (m.State.STOPPED, m.State.EXITED):
                await self._feed(dep, proxy, m.Start())
            if proxy.machine.state is m.State.RUNNING:
                for unit in dep.instances():
                    if dep.units.get(unit.launch.name) is not unit:
                        # Forgotten while this pass awaited a spawn before it (a rollback
                        # dropped it): starting it now would run a process nobody tracks.
                        continue
                    if unit.dropping:
                        if unit.machine.state is m.State.EXITED:
                            await self._feed(dep, unit, m.Stop())
                    elif unit.machine.state in (m.State.STOPPED, m.State.EXITED):
                        await self._feed(dep, unit, m.Start())
                self._forget_stopped(dep)
            return
        for unit in dep.instances():
            if unit.machine.state not in (m.State.STOPPED,):
                await self._feed(dep, unit, m.Stop())
        if all(u.machine.state is m.State.STOPPED for u in dep.instances()):
            await self._feed(dep, proxy, m.Stop())
            await self._feed(dep, proxy, m.Drained())  # nothing routes through it any more

    # Performing actions ------------------------------------------------------------------

    async def _feed(self, dep: Supervised, unit: Unit, event: m.Event) -> None:
        before = unit.machine.state
        unit.machine, actions = m.step(unit.machine, event, self.clock.now())
        if unit.machine.state is not before:
            log.info("%s/%s: %s -> %s", dep.name, unit.launch.name, before, unit.machine.state)
            samples = len(unit.start_samples)
            note_start(unit, before, self.clock.now())
            if len(unit.start_samples) > samples and self.on_start_sample is not None:
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
        elif isinstance(action, m.Drain | m.Undrain):
            if not unit.launch.is_proxy and dep.proxy.machine.state is m.State.RUNNING:
                await self.probe.set_draining(
                    dep.proxy.launch.url,
                    dep.admin_token,
                    unit.launch.url,
                    isinstance(action, m.Drain),
                )
        elif isinstance(action, m.Emit):
            message = action.message
            if action.kind in _FAILURES:
                message += f"; {unit.refusal}" if unit.refusal else self._last_words(dep, name)
            self._emit(action.kind, f"{dep.name}/{name}: {message}", dep.name)
        # Schedule: every pass ticks every machine, so deadlines fire within poll_interval.

    async def _spawn(self, dep: Supervised, unit: Unit) -> None:
        await spawning.spawn(
            dep,
            unit,
            self.backend,
            self.settings.launch,
            feed=self._feed,
            emit=self._emit,
            addresses=self.engine_addresses(dep.name),
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

    def _emit(self, kind: str, message: str, deployment: str | None = None) -> None:
        log.info("%s: %s", kind, message)
        self.on_event(ACTOR, kind, message, deployment)

    def _deployment(self, name: str) -> Supervised:
        try:
            return self.deployments[name]
        except KeyError:
            raise SupervisorError(f"no deployment {name!r} is supervised") from None

    def _unit(self, dep: Supervised, instance: str) -> Unit:
        try:
            return dep.units[instance]
        except KeyError:
            raise SupervisorError(
                f"{dep.name} has no instance {instance!r}; it has {', '.join(dep.units)}"
                + did_you_mean(instance, dep.units)
            ) from None


def _raise(exc: OSError) -> Callable[[], None]:
    """A write that fails as `exc` did (a fault caught where it was not foreseen)."""

    def fail() -> None:
        raise exc

    return fail


def _runs(now: Launch, wanted: Launch) -> bool:
    """`now` is the very process `wanted` would start (what identifies it; not the handover)."""
    return (now.argv, now.env, now.address) == (wanted.argv, wanted.env, wanted.address)
