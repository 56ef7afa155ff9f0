"""The controller as the REST API sees it: lifecycle, status, logs, previews and mode switches
of stored deployments, every operator action recorded as an event; the cluster's nodes with
what runs on each, and where each started process was placed
(controller/supervise/placement_log.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from controller.launch.cluster_view import NodeView, cluster_view
from controller.launch.placement import Node
from controller.launch.ports import AllocatedPorts
from controller.spec.deployment import DeploymentSpec
from controller.spec.validation import engine_problems
from controller.supervise.placement_log import PlacementLog
from controller.supervise.supervisor import Supervisor, SupervisorError
from controller.switch.preview import preview
from controller.switch.record import IN_PROGRESS, strategy_of
from controller.switch.role_move import RoleMover, plan_move
from controller.switch.runner import (
    ACTOR,
    ChangeStore,
    StoreRevisions,
    SwitchRecord,
    SwitchRevisions,
    SwitchRunner,
)
from domain.errors import ConfigError, InvalidTransition, Unavailable

log = logging.getLogger("pdctl.controller")
# (actor, kind, message, deployment, detail) -> None: how events reach the store.
Recorder = Callable[[str, str, str, str | None, dict | None], object]  # Store.record

_STOPPED = ("STOPPED", "EXITED", "FATAL")
NODES_TIMEOUT_S = 10.0  # a cluster that takes longer to list its nodes is not answering


STOP_WAIT_S = 120.0  # a restart on a new layout waits this long for every process to stop


class ClusterUnreachable(Unavailable):
    """The backend could not list its nodes just now (the Ray cluster does not answer)."""

    title = "Cluster unreachable"


class ControlService:
    def __init__(
        self,
        supervisor: Supervisor,
        record: Recorder,
        allow_code_env: bool = False,
        placements: PlacementLog | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.record = record
        # The host's override setting: whether a spec's unsafe_allow may let code through.
        self.allow_code_env = allow_code_env
        self.placements = placements  # None: where processes were placed is not kept
        # Each proxy's admin token is the supervisor's to keep (one per proxy it started).
        self.switches = SwitchRunner(supervisor, record)
        self.role_moves = RoleMover(supervisor, record)  # controller/switch/role_move.py

    # -- queries ---------------------------------------------------------------------------

    def known(self, name: str) -> bool:
        return name in self.supervisor.deployments

    def is_active(self, name: str) -> bool:
        return self.known(name) and any(
            u["state"] not in _STOPPED for u in self.supervisor.status(name)
        )

    def status(self, name: str) -> list[dict[str, Any]]:
        return self.supervisor.status(name) if self.known(name) else []

    def statuses(self) -> dict[str, list[dict[str, Any]]]:
        """Every deployment the supervisor keeps, with its processes' status rows."""
        return {name: self.supervisor.status(name) for name in self.supervisor.deployments}

    def log_tail(self, name: str, instance: str, lines: int) -> list[str]:
        return self.supervisor.log_tail(name, instance, lines)

    def preview(self, spec: DeploymentSpec, ports: AllocatedPorts) -> dict[str, dict[str, Any]]:
        return self.supervisor.preview(spec, ports)

    async def cluster(self) -> list[NodeView]:
        """Every node the backend sees, with the processes on each; ClusterUnreachable (503)
        when the cluster does not answer now."""
        nodes = await self._nodes()
        backend = self.supervisor.backend
        # One host: every process is on it (status rows name a node only on a cluster).
        here = None if backend.clustered or not nodes else backend.home(nodes).id
        return cluster_view(nodes, self.statuses(), here)

    async def _nodes(self) -> list[Node]:
        try:
            return await asyncio.wait_for(self.supervisor.nodes(), NODES_TIMEOUT_S)
        except TimeoutError:
            raise ClusterUnreachable(
                f"the cluster did not list its nodes within {NODES_TIMEOUT_S:g} s; try again"
            ) from None
        except Exception as exc:  # Ray raises many kinds here; each means it did not answer
            log.warning("listing the cluster's nodes failed: %s", exc)
            raise ClusterUnreachable(f"the cluster does not answer: {_one_line(exc)}") from None

    # -- actions -----------------------------------------------------------------------------

    async def start(
        self,
        name: str,
        spec: DeploymentSpec,
        ports: AllocatedPorts,
        actor: str,
        reason: str | None,
        revision: int,
    ) -> None:
        self.switches.refuse_if_running(name)
        self.refuse_code(name, spec, revision)
        await self.supervisor.start(name, spec, ports)
        await self._keep_placement(name, spec)
        self.record(
            actor,
            "deployment.start",
            f"{name}: start (revision {revision})" + _why(reason),
            name,
            {"revision": revision},
        )

    async def _keep_placement(self, name: str, spec: DeploymentSpec) -> None:
        if self.placements is None:
            return
        placed = self.supervisor.deployments[name].placed
        home = None
        if placed is None:  # one host: every process on it
            nodes = await self._nodes()
            home = self.supervisor.backend.home(nodes) if nodes else None
        self.placements.started(name, spec, placed, home)

    async def stop(self, name: str, actor: str, reason: str | None) -> None:
        self.switches.refuse_if_running(name)
        await self.supervisor.stop(name)
        self.record(actor, "deployment.stop", f"{name}: stop" + _why(reason), name, None)

    async def restart_on(
        self, name: str, spec: DeploymentSpec, ports: AllocatedPorts, revision: int, **who: Any
    ) -> None:
        """Run `name` as a new revision whose layout differs (groups added, removed or
        resized): stop every process, then start the new ones. `who`: actor, reason."""
        self.switches.refuse_if_running(name)
        self.refuse_code(name, spec, revision)
        await self.supervisor.stop(name, wait=STOP_WAIT_S)
        await self.start(name, spec, ports, who["actor"], who.get("reason"), revision)

    async def restart(
        self, name: str, instance: str | None, actor: str, reason: str | None
    ) -> None:
        self.switches.refuse_if_running(name)
        await self.supervisor.restart(name, instance)
        what = f"{name}/{instance}" if instance else name
        self.record(
            actor,
            "deployment.restart",
            f"{what}: restart" + _why(reason),
            name,
            {"instance": instance},
        )

    def switch(
        self,
        name: str,
        spec: DeploymentSpec,
        ports: AllocatedPorts,
        target: str,
        strategy: str,
        actor: str,
        reason: str | None,
        revisions: SwitchRevisions,
    ) -> SwitchRecord:
        """Write the target revision (in progress), then switch in the background; the record
        shows the progress and `revisions` how it settled."""
        self.refuse_code(name, spec, None)
        told = self.switch_preview(name, spec, target)
        record = self.switches.begin(name, spec, ports, target, strategy, actor, reason, revisions)
        record.forecast = next(f for f in told["strategies"] if f["strategy"] == strategy)
        return record

    async def move_role(
        self, name: str, spec: DeploymentSpec, instance: str, role: str, **how: Any
    ) -> dict[str, Any]:
        """Move one instance between prefill and decode (controller/switch/role_move.py); `how`:
        store, actor, reason, drain_timeout_s."""
        move = plan_move(spec, instance, role)  # the input first: 422s name the field
        if not self.known(name):
            raise InvalidTransition(f"deployment {name!r} has not been started")
        self.switches.refuse_if_running(name)
        return await self.role_moves.move(name, move, **how)

    def switch_preview(
        self, name: str, spec: DeploymentSpec, target: str, rate: float | None = None
    ) -> dict[str, Any]:
        """Each strategy's forecast duration and cost for switching `name` to `target`."""
        measured = self.supervisor.start_times(name) if self.known(name) else {}
        return preview(spec, target, measured, self.switches.history(name), rate)

    def refuse_code(self, name: str, spec: DeploymentSpec, revision: int | None) -> None:
        """Nothing runs what today's engine allowlists refuse, whenever it was stored (a
        revision saved before a rule existed is checked again at every start)."""
        problems = engine_problems(spec, overrides_on=self.allow_code_env)
        if problems:
            which = f"revision {revision}" if revision is not None else "the current revision"
            self.record(
                ACTOR,
                "deployment.refused",
                f"{name}: {which} was not started: {problems[0].msg}",
                name,
                {"revision": revision, "problems": [list(map(str, p.loc)) for p in problems]},
            )
            raise ConfigError(problems)

    def recover_switches(self, store: ChangeStore) -> list[SwitchRecord]:
        """After a restart: each switch the stopped control plane left in progress (its
        revision says so) gets routing put back and is settled by what runs now."""
        recovered = []
        for current in store.deployments():
            if current.state == IN_PROGRESS:
                revisions = StoreRevisions(store)
                strategy = strategy_of(current.reason)
                rec = self.switches.recover(
                    current.name, current.revision, current.spec, revisions, strategy
                )
                recovered += [rec] if rec is not None else []
        return recovered

    async def close(self) -> None:
        await self.switches.close()
        await self.supervisor.close()


def _why(reason: str | None) -> str:
    return f" ({reason})" if reason else ""


def _one_line(exc: BaseException) -> str:
    """Why, in one line: never a traceback (Ray's errors carry pages of one)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


__all__ = ["ControlService", "SupervisorError", "asyncio"]
