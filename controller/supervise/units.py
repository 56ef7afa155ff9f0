"""What the supervisor tracks per process and per deployment, and the status row it shows."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from controller.backends.local import ProcessRecord
from controller.clients.registry_watch import RefusalWatch
from controller.launch import proxy_members
from controller.launch.placement import Placed
from controller.launch.ports import AllocatedPorts
from controller.launch.render import Launch
from controller.spec.deployment import DeploymentSpec
from controller.spec.redact import redact_command
from controller.supervise import machine as m
from controller.supervise.run_state import Told

IDLE = (m.State.STOPPED, m.State.EXITED, m.State.FATAL)
LIVE = (m.State.STARTING, m.State.RUNNING, m.State.STOPPING)


@dataclass
class Unit:
    """One supervised process and what the shell knows about it."""

    launch: Launch
    machine: m.Machine
    record: ProcessRecord | None = None
    healthy: bool | None = None
    registered: bool | None = None
    failed_probes: int = 0
    cpu_seen: tuple[int, int] | None = None  # (pid, CPU ticks) at its last probe (probing.py)
    stalled_since: float | None = None  # silent on /health while using CPU, since (probing.py)
    next_probe: float = 0.0
    refusal: str | None = None  # why the last start was not even tried (its port is held)
    timing_start: bool = False  # spawned by us and not ready yet (an adoption is not timed)
    start_samples: list[float] = field(default_factory=list)  # spawn -> ready, seconds
    revision: int | None = None  # the revision whose launch this runs (None: not told)
    dropping: bool = False  # not in the revision it converges to: stopped, then forgotten
    # Ready, and the proxy not yet told to route to it again (it was down, or did not
    # answer): told on each pass until it is, or until the unit is drained again.
    undrain_owed: bool = False
    # Told its launch in place (a role move, a proxy told its instances): the process it was
    # told in, and what it runs since, though its command line says otherwise (adoption.py).
    told_in_place: Told | None = None

    def tell_in_place(self, launch: Launch) -> None:
        """From now on this process runs `launch`, without a restart."""
        record = self.record
        if record is not None and record.child_pid is not None:
            runs = tuple(launch.argv)
            self.told_in_place = (
                None
                if record.argv == runs  # told back to its own command line
                else Told(record.child_pid, record.child_start_time, record.argv, runs)
            )
        self.launch = launch

    def tell_listing(self, url: str, role: str | None) -> bool:
        """A proxy told at its admin API to list `url` as a `role` instance (None: not at
        all) runs that from now on; told back what it started with (in any order), its own
        command line. False: nothing changed."""
        argv = proxy_members.told(self.launch.argv, url, role)
        started = self.record.argv if self.record is not None else ()
        if proxy_members.same(argv, started):
            argv = list(started)
        if argv == list(self.launch.argv):
            return False
        self.tell_in_place(replace(self.launch, argv=argv))
        return True

    def still_told(self) -> Told | None:
        """What it was told in place, while the very process it was told in runs."""
        told, record = self.told_in_place, self.record
        if told is None or record is None:
            return None
        return told if (record.child_pid, record.child_start_time) == told[:2] else None


START_SAMPLES = 20  # the latest starts kept per process


def note_start(unit: Unit, before: m.State, now: float) -> None:
    """A process this supervisor spawned became ready: keep how long that took (the switch
    forecast's measured start time)."""
    mach = unit.machine
    ready = before is m.State.STARTING and mach.state is m.State.RUNNING
    if unit.timing_start and ready and mach.started_at is not None:
        unit.start_samples = [*unit.start_samples, round(now - mach.started_at, 3)]
        del unit.start_samples[:-START_SAMPLES]
    if mach.state is not m.State.STARTING:
        unit.timing_start = False


@dataclass
class Supervised:
    """One deployment under supervision."""

    name: str
    spec: DeploymentSpec
    ports: AllocatedPorts
    folder: Path
    units: dict[str, Unit]  # proxy first, then instances (start order)
    running: bool = True  # desired state
    admin_token: str | None = None  # what its proxy's /admin takes; never shown, never logged
    refusals: RefusalWatch = field(default_factory=RefusalWatch)  # told as events
    placed: Placed | None = None  # each process's node on a cluster (None: this host)
    revision: int | None = None  # the desired revision (`spec`'s), if the caller named it
    # Revisions some units still run mid-rollout (not `revision`), with their ports, so a
    # later supervisor renders each unit as what it runs (controller/supervise/run_state.py).
    older: dict[int, tuple[DeploymentSpec, AllocatedPorts]] = field(default_factory=dict)

    @property
    def proxy(self) -> Unit:
        return self.units["proxy"]

    def instances(self) -> list[Unit]:
        return [u for u in self.units.values() if not u.launch.is_proxy]

    def unit_revisions(self) -> dict[str, int]:
        return {n: u.revision for n, u in self.units.items() if u.revision is not None}

    def told_in_place(self) -> dict[str, Told]:
        """The processes told their launch in place, by name (kept in the run dir)."""
        return {n: told for n, u in self.units.items() if (told := u.still_told()) is not None}

    def prune_older(self) -> None:
        """Keep only the older revisions some unit still runs."""
        used = {u.revision for u in self.units.values()}
        self.older = {r: v for r, v in self.older.items() if r in used and r != self.revision}

    def forget_dropped(self, names: set[str]) -> None:
        """Forget stopped processes a new spec no longer has (a group removed or made
        smaller while the deployment was stopped), so a start never revives them."""
        for name in [n for n, u in self.units.items() if n not in names]:
            if self.units[name].machine.state not in LIVE:
                self.units[name].dropping = True  # for whoever still holds it
                del self.units[name]


def _node_of(dep: Supervised, name: str) -> str | None:
    node = dep.placed.nodes.get(name) if dep.placed else None
    return node.id if node else None


def describe(dep: Supervised, unit: Unit, now: float, wall: float) -> dict[str, Any]:
    """The status row of one process (the REST API's and the dashboard's shape)."""
    mach, launch = unit.machine, unit.launch
    uptime = None
    if mach.state in LIVE and mach.pid is not None:
        started = unit.record.started_at if unit.record else None
        # The shim's wall-clock start survives a restart of pdctl; the machine's does not.
        uptime = (wall - started) if started else m.uptime(mach, now)
    return {
        "name": launch.name,
        "role": launch.role or "proxy",
        "group": launch.group,
        "mode": launch.mode,
        "state": mach.state.value,
        "pid": mach.pid,
        "uptime": None if uptime is None else round(max(0.0, uptime), 3),
        "restarts": mach.restarts,
        "failures": mach.failures,
        "health": unit.healthy,
        "registration": unit.registered if launch.registers else None,
        "url": launch.url,
        "ports": launch.ports.model_dump()
        if launch.ports
        else {"http": dep.ports.proxy, "registry": dep.ports.registry},
        "gpus": launch.gpus or (unit.record.gpu_ids if unit.record else []),
        "node": _node_of(dep, launch.name),
        "address": launch.address,
        "last_exit_code": mach.last_exit,
        "revision": unit.revision,
        "dropping": unit.dropping,
        "command": redact_command(launch.command),  # rows are shown to viewers
        "log_error": unit.record.log_error if unit.record else None,
    }
