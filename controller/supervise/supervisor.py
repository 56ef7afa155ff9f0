"""The supervisor's facade, what the REST API and the switches call: start, stop, restart and
keep deployments, and ask how their processes run. The passes that watch them are
controller/supervise/watcher.py's; each process's life is controller/supervise/machine/'s.

Seams: a process backend (controller/backends/local.py), an HTTP probe
(controller/clients/health.py) and a clock; tests pass fakes and drive `poll()` themselves.
Deployments live in the run dir (controller/supervise/run_state.py, plus one directory per
process), so a new supervisor on the same run dir adopts what still runs and cleans up what
died: no orphans, no duplicates (controller/supervise/adoption.py). Health and registration
probes are controller/supervise/probing.py's.

The run dir is made absolute once (controller/supervise/settings.py) and handed to every shim
as such: a relative one would otherwise mean one directory to us and another to a shim started
elsewhere. Files in it are 0600 in 0700 directories (controller/backends/private_files.py). A
process is adopted only if it is the one launched (pid, start time and command line); an
instance whose port is already held is never started twice: its own process found there is
adopted, anything else is reported.

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
from typing import Any

from controller.backends import private_files
from controller.backends.local import ProcessBackend, ShimBackend
from controller.clients.health import HttpProbe, Probe
from controller.launch.placement import Addresses, Node, PlacementError
from controller.launch.ports import AllocatedPorts
from controller.launch.process import Launch
from controller.launch.render import render
from controller.spec.deployment import DeploymentSpec
from controller.spec.redact import redact_text
from controller.supervise import converging, placing, run_state
from controller.supervise import machine as m
from controller.supervise.adoption import adopt_saved
from controller.supervise.clock import Clock, SystemClock
from controller.supervise.cut_short import run_whole
from controller.supervise.run_dir_faults import Fault, RunDirFaults
from controller.supervise.settings import SupervisorSettings
from controller.supervise.stale_peers import cancel_checks
from controller.supervise.units import IDLE, LIVE, Supervised, Unit, describe
from controller.supervise.watcher import Watcher, engine_addresses
from domain.errors import NotFound, SpecInvalid
from domain.names import did_you_mean

log = logging.getLogger("pdctl.supervisor")
EventSink = Callable[[str, str, str, str | None], None]  # (actor, kind, message, deployment)
ACTOR = "supervisor"
__all__ = ["Supervisor", "SupervisorError", "SupervisorSettings"]


class SupervisorError(NotFound):
    """A facade call that cannot be done: no such supervised deployment or instance (404)."""


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
        self._watch = Watcher(
            settings,
            self.deployments,
            self.backend,
            self.probe,
            self.clock,
            self.faults,
            self._emit,
            self._start_sample,
        )

    # Facade (the REST API calls these) ---------------------------------------------------

    async def open(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch.run(), name="pdctl-supervisor")

    async def close(self) -> None:
        """Stop supervising; the processes keep running."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await asyncio.gather(*(cancel_checks(w) for w in self._watch.stale.values()))
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

        async def converge() -> None:
            await converging.converge(self._watch, dep, launches, revision, only)
            dep.prune_older()
            self._watch.save(dep)
            self._emit("start", f"{name}: start requested", name)
            await self._watch.reconcile(dep)

        await run_whole(converge())

    def keep_launch(self, name: str, process: str, spec: DeploymentSpec) -> None:
        """`process` runs `spec`'s launch from now on, without a restart: what it was told at
        its admin API (the instances a proxy lists) is what a later restart starts it with."""
        dep = self._deployment(name)
        unit = self._unit(dep, process)
        for launch in render(spec, dep.ports, self.settings.launch, self._addresses(dep.placed)):
            if launch.name == process:
                unit.tell_in_place(launch)
                unit.revision = dep.revision
        self._watch.save(dep)

    def proxy_told(self, name: str, url: str, role: str | None) -> None:
        """`name`'s proxy was told at its admin API to route to `url` as a `role` instance
        (None: to forget it): a later restart starts it listing that, mid-rollout included,
        where its revision's launch lists what the rollout is moving away from."""
        dep = self.deployments.get(name)
        if dep is not None and "proxy" in dep.units and dep.proxy.tell_listing(url, role):
            self._watch.save(dep)

    def keep_all(self, name: str, spec: DeploymentSpec, revision: int | None) -> None:
        """Every process runs `spec` (revision `revision`) from now on, without a restart:
        what changed was changed in place (a runtime role move), so a later restart starts
        each as it serves now."""
        dep = self._deployment(name)
        for launch in render(spec, dep.ports, self.settings.launch, self._addresses(dep.placed)):
            unit = dep.units.get(launch.name)
            if unit is not None:
                unit.tell_in_place(launch)
                unit.revision = revision
        if dep.revision is not None and dep.revision != revision:
            dep.older[dep.revision] = (dep.spec, dep.ports)
        dep.spec, dep.revision = spec, revision
        dep.prune_older()
        self._watch.save(dep)

    def settle_done(
        self, name: str, spec: DeploymentSpec, ports: AllocatedPorts, revision: int
    ) -> None:
        """A rollout to `revision` ended done: what runs it is stamped with it, and once every
        process does, the deployment runs `spec` (a rollout that restarted nothing, such as an
        edit of the canary or an undo to what runs already, never started anything)."""
        dep = self.deployments.get(name)
        if dep is None:
            return
        addresses = self._addresses(dep.placed)
        launches = render(spec, ports, self.settings.launch, addresses)
        if converging.stamp_kept(dep, launches, revision) and dep.revision != revision:
            if dep.revision is not None:
                dep.older[dep.revision] = (dep.spec, dep.ports)
            dep.spec, dep.ports, dep.revision = spec, ports, revision
        dep.prune_older()
        self._watch.save(dep)

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
        self._watch.save(dep)
        self._emit("stop", f"{name}: stop requested", name)
        await run_whole(self._watch.reconcile(dep))
        if wait is not None:
            await self.wait_for(
                name, lambda units: all(u["state"] in IDLE for u in units), wait, "stopped"
            )

    async def restart(self, name: str, instance: str | None = None) -> None:
        dep = self._deployment(name)
        units = dep.instances() if instance is None else [self._unit(dep, instance)]
        await run_whole(self._watch.feed_each(dep, units, m.Restart()))

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
        return engine_addresses(self._deployment(name), self.settings.launch)

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

    async def poll(self) -> None:
        """One pass over every deployment: observe, then reconcile (controller/supervise/
        watcher.py; a test drives these itself)."""
        await self._watch.poll()

    def _emit(self, kind: str, message: str, deployment: str | None = None) -> None:
        log.info("%s: %s", kind, message)
        self.on_event(ACTOR, kind, message, deployment)

    def _start_sample(self, deployment: str, group: str, seconds: float) -> None:
        if self.on_start_sample is not None:
            self.on_start_sample(deployment, group, seconds)

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
