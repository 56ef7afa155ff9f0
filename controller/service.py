"""The controller as the REST API sees it: lifecycle, status, logs, previews and mode switches
of stored deployments, every operator action recorded as an event; the cluster's nodes with
what runs on each, and where each started process was placed
(controller/supervise/placement_log.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from controller.attached import attach_refusal, attached_preview
from controller.cluster_nodes import list_nodes
from controller.launch.cluster_view import NodeView, cluster_view
from controller.launch.ports import AllocatedPorts
from controller.recorder import Recorder, reason_suffix
from controller.rollout.changes import Action
from controller.rollout.engine import ACTOR, Goal, RolloutEngine, RolloutLog, Target, TargetLoader
from controller.rollout.memory_log import MemoryLog
from controller.rollout.record import IN_PROGRESS, RolloutRecord
from controller.rollout.revisions import ChangeStore, SwitchRevisions
from controller.rollout.status import instance_truth
from controller.rollout.strategies import allowed, start_ready
from controller.rollout.strategies import default as default_strategy
from controller.spec.deployment import DeploymentSpec
from controller.spec.surface.reach import EngineReach
from controller.spec.validation import engine_problems
from controller.steering import Steering
from controller.supervise.placement_log import PlacementLog
from controller.supervise.supervisor import Supervisor, SupervisorError
from controller.switch.plan import Step, StepKind, SwitchBusy, plan, target_spec
from controller.switch.preview import preview
from controller.switch.steps import Timeouts
from domain.errors import ConfigError, Conflict, InvalidTransition, UpstreamError
from domain.names import did_you_mean
from state.changes import RevisionState

log = logging.getLogger("pdctl.controller")

_STOPPED = ("STOPPED", "EXITED", "FATAL")


STOPPED_MID_CHANGE = "the control plane stopped during this change; no rollout was left to end it"


class ControlService:
    def __init__(
        self,
        supervisor: Supervisor,
        record: Recorder,
        allow_code_env: bool = False,
        placements: PlacementLog | None = None,
        rollout_log: RolloutLog | None = None,
        load: TargetLoader | None = None,
        timeouts: Timeouts | None = None,
        reach: EngineReach | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.record = record
        # The host's override setting: whether a spec's unsafe_allow may let code through.
        self.allow_code_env = allow_code_env
        # Where engines' paths and listeners may point (the operator's roots, the bound address).
        self.reach = reach or EngineReach()
        self.placements = placements  # None: where processes were placed is not kept
        self.rollout_log = rollout_log or MemoryLog()
        # Every change to what runs goes through this one engine (controller/rollout/).
        self.rollouts = RolloutEngine(
            supervisor,
            record,
            self.rollout_log,
            load or _unknown_revision,
            timeouts=timeouts or _timeouts(supervisor),
        )
        # Role moves and proxy verbs: steering what runs without a new revision.
        self.steering = Steering(supervisor, record, self.rollouts)
        supervisor.on_start_sample = self._keep_start

    def _keep_start(self, name: str, group: str, seconds: float) -> None:
        try:
            self.rollout_log.add_start_samples(name, group, [seconds])
        except Exception as exc:  # a measurement lost is no reason to fail a start
            log.warning("%s: keeping a start time failed: %s", name, exc)

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
        if spec.attached:  # runs elsewhere: the lines its operator would type, at its addresses
            return attached_preview(spec)
        return self.supervisor.preview(spec, ports)

    def switches(self, name: str) -> list[RolloutRecord]:
        """This deployment's mode switches, oldest first (they outlive the control plane)."""
        return [r for r in reversed(self.rollouts.history(name)) if r.kind == "switch"]

    def drift(self, name: str, desired: Target) -> list[dict[str, Any]]:
        """Each process: the revision it runs, the one desired, whether it drifted and why
        (controller/rollout/status.py)."""
        if not self.known(name):
            return []
        wanted = self.supervisor.launches(name, desired.spec, desired.ports)
        return instance_truth(self.supervisor.running(name), wanted, desired.revision)

    async def cluster(self) -> list[NodeView]:
        """Every node the backend sees, with the processes on each; ClusterUnreachable (503)
        when the cluster does not answer now."""
        nodes = await list_nodes(self.supervisor)
        backend = self.supervisor.backend
        # One host: every process is on it (status rows name a node only on a cluster).
        here = None if backend.clustered or not nodes else backend.home(nodes).id
        return cluster_view(nodes, self.statuses(), here)

    # -- actions: each is a rollout (controller/rollout/engine.py) ----------------------------

    async def start(
        self,
        name: str,
        spec: DeploymentSpec,
        ports: AllocatedPorts,
        actor: str,
        reason: str | None,
        revision: int,
        pending: bool = False,
    ) -> RolloutRecord:
        """Start every process at `revision`; the rollout ends when all are ready (and settles
        the revision applied if it was `pending`)."""
        if spec.attached:  # pdctl owns no process of it (controller/attached.py)
            raise attach_refusal(name, "start", spec)
        await self.rollouts.let_start_end(name)
        self.rollouts.refuse_if_running(name, "start")
        self.refuse_code(name, spec, revision)
        target = Target(revision, spec, ports)
        instances = [g for g in spec.groups for _ in range(g.count)]
        kv = spec.kv_backend
        steps = [Step(StepKind.APPLY, (), spec=spec)]
        if instances:
            steps += start_ready(spec, registers=kv is not None and kv.registers)
        goal = Goal(name, target, "start", actor, reason, strategy="recreate", steps=steps)
        goal.settles, goal.auto_rollback = pending, False
        rec = await self.rollouts.begin(goal, inline=1)
        await self._keep_placement(name, spec)
        self.record(
            actor,
            "deployment.start",
            f"{name}: start (revision {revision})" + reason_suffix(reason),
            name,
            {"revision": revision, "rollout": rec.id},
        )
        return rec

    async def _keep_placement(self, name: str, spec: DeploymentSpec) -> None:
        if self.placements is None or not self.known(name):
            return
        placed = self.supervisor.deployments[name].placed
        home = None
        if placed is None:  # one host: every process on it
            nodes = await list_nodes(self.supervisor)
            home = self.supervisor.backend.home(nodes) if nodes else None
        self.placements.started(name, spec, placed, home)

    async def stop(self, name: str, actor: str, reason: str | None) -> None:
        """Stop every process. A start still waiting for them is aborted (stopping is how an
        operator gives up on a start that does not come up); any other rollout is a 409."""
        active = self.rollouts.active(name)
        if active is not None and active.kind == "start":
            with contextlib.suppress(Conflict):
                await self.rollouts.abort(name, actor, "stopped")
            await self.rollouts.wait(name)
        self.rollouts.refuse_if_running(name, "stop")
        await self.supervisor.stop(name)
        self.record(actor, "deployment.stop", f"{name}: stop" + reason_suffix(reason), name, None)

    async def apply(
        self,
        name: str,
        target: Target,
        kind: str,
        actor: str,
        reason: str | None,
        *,
        back: Target | None,
        strategy: str | None = None,
        auto_rollback: bool = True,
        settles: bool = True,
    ) -> RolloutRecord:
        """Roll `target` (a revision in progress) out to the running deployment: what differs
        restarts, by `strategy` (None: roll where the layout allows it, else hold); a failure
        rolls back to `back`, the last applied revision."""
        if target.spec.attached:
            raise attach_refusal(name, "apply", back.spec if back else target.spec, target.spec)
        self.refuse_code(name, target.spec, target.revision)
        goal = Goal(
            name,
            target,
            kind,
            actor,
            reason,
            strategy=strategy,
            back=back,
            auto_rollback=auto_rollback,
            settles=settles,
        )
        return await self.rollouts.begin(goal)

    async def forecast_apply(self, name: str, target: Target) -> dict[str, Any]:
        """What rolling `target` out would do, before it runs: each process's change and
        why, and the strategies this layout allows (with why not)."""
        goal = Goal(name, target, "apply", "preview")
        found = await self.rollouts.changes(goal)
        layout = self.rollouts.layout(goal)
        return {
            "changes": {a.value: [c.name for c in found if c.action is a] for a in Action},
            "why": {c.name: c.why for c in found if c.why},
            "strategies": allowed(found, layout),
            "default": default_strategy(found, layout),
        }

    async def restart(
        self,
        name: str,
        instance: str | None,
        actor: str,
        reason: str | None,
        desired: Target | None = None,
        strategy: str | None = None,
    ) -> RolloutRecord:
        """Converge to the desired revision: what drifted (or is unhealthy) restarts, on the
        desired revision's placement. Nothing drifted: every instance (or `instance`) is
        restarted, as asked, one pair at a time where the layout allows it."""
        await self.rollouts.let_start_end(name)
        self.rollouts.refuse_if_running(name, "restart")
        dep = self.supervisor.deployments.get(name)
        if dep is None:
            raise InvalidTransition(f"deployment {name!r} has not been started")
        if instance is not None and instance not in dep.units:
            raise SupervisorError(
                f"{name} has no instance {instance!r}; it has {', '.join(dep.units)}"
                + did_you_mean(instance, dep.units)
            )
        target = desired or Target(dep.revision or 0, dep.spec, dep.ports)
        self.refuse_code(name, target.spec, target.revision)
        goal = Goal(name, target, "restart", actor, reason, strategy=strategy, settles=False)
        goal.auto_rollback = False  # it converges to the revision already desired
        goal.force = {instance} if instance is not None else None
        rec = await self.rollouts.begin(goal)
        what = f"{name}/{instance}" if instance else name
        self.record(
            actor,
            "deployment.restart",
            f"{what}: restart by rollout {rec.id}" + reason_suffix(reason),
            name,
            {"instance": instance, "rollout": rec.id},
        )
        return rec

    async def switch(
        self,
        name: str,
        spec: DeploymentSpec,
        ports: AllocatedPorts,
        target: str,
        strategy: str,
        actor: str,
        reason: str | None,
        revisions: SwitchRevisions,
        back: Target | None = None,
    ) -> RolloutRecord:
        """Write the target revision (in progress), then switch in the background by
        `strategy`; the record shows the progress and the revision how it settled."""
        if spec.attached:
            groups = [g.model_copy(update={"mode": target}) for g in spec.groups]
            raise attach_refusal(name, "switch", spec, spec.model_copy(update={"groups": groups}))
        self.refuse_code(name, spec, None)
        await self.rollouts.let_start_end(name)
        self.rollouts.refuse_if_running(name, "switch")
        steps = plan(spec, target, strategy)  # 409s for what cannot be switched this way
        units = self.supervisor.status(name) if self.known(name) else []
        if not units:
            raise SwitchBusy(f"{name!r} is not running: start it, or edit its mode instead")
        unwell = [f"{u['name']} is {u['state']}" for u in units if u["state"] != "RUNNING"]
        if unwell:
            raise SwitchBusy("every instance must be RUNNING before a switch: " + ", ".join(unwell))
        told = self.switch_preview(name, spec, target)
        why = f"mode switch to {target} ({strategy})" + (f": {reason}" if reason else "")
        goal_spec = target_spec(spec, steps)
        revision = revisions.begin(name, goal_spec, actor, why)
        goal = Goal(
            name,
            Target(revision, goal_spec, ports),
            "switch",
            actor,
            reason,
            strategy=strategy,
            steps=steps,
            back=back or Target(self.supervisor.deployments[name].revision or 0, spec, ports),
            switch_mode=target,
            forecast=next(f for f in told["strategies"] if f["strategy"] == strategy),
        )
        try:
            return await self.rollouts.begin(goal)
        except Exception as exc:
            revisions.settle(name, revision, RevisionState.FAILED, f"not begun: {exc}")
            raise

    async def move_role(
        self, name: str, spec: DeploymentSpec, instance: str, role: str, **how: Any
    ) -> dict[str, Any]:
        """Move one instance between prefill and decode (controller/steering.py)."""
        return await self.steering.move_role(name, spec, instance, role, **how)

    async def abort(self, name: str, actor: str, reason: str | None) -> RolloutRecord:
        rec = await self.rollouts.abort(name, actor, reason)
        self.record(
            actor,
            "rollout.abort",
            f"{name}: abort {rec.describe()}; it rolls back" + reason_suffix(reason),
            name,
            {"rollout": rec.id},
        )
        return rec

    def switch_preview(
        self, name: str, spec: DeploymentSpec, target: str, rate: float | None = None
    ) -> dict[str, Any]:
        """Each strategy's forecast duration and cost for switching `name` to `target`."""
        measured = self.start_times(name)
        return preview(spec, target, measured, self.switches(name), rate)

    def start_times(self, name: str) -> dict[str, list[float]]:
        """Measured starts by group: kept in the store, and this supervisor's own."""
        kept = self.rollout_log.start_samples(name)
        if not kept and self.known(name):  # a log that keeps none: this supervisor's own
            return self.supervisor.start_times(name)
        return kept

    def refuse_code(self, name: str, spec: DeploymentSpec, revision: int | None) -> None:
        """Nothing runs what today's engine allowlists refuse, whenever it was stored (a
        revision saved before a rule existed is checked again at every start)."""
        problems = engine_problems(spec, overrides_on=self.allow_code_env, reach=self.reach)
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

    def recover(self, store: ChangeStore) -> list[RolloutRecord]:
        """After a restart: each rollout the stopped control plane left running is taken over
        (routing put back, then on toward its revision). A revision left in progress with no
        rollout to finish it (written by an older pdctl) is settled failed: nothing may hold
        a deployment that no verb can release."""
        taken = self.rollouts.recover()
        held = {r.deployment for r in taken}
        for current in store.deployments():
            if current.state == IN_PROGRESS and current.name not in held:
                store.settle_change(current.name, current.revision, "failed", STOPPED_MID_CHANGE)
        return taken

    async def close(self) -> None:
        await self.rollouts.close()
        await self.supervisor.close()


def _timeouts(supervisor: Supervisor) -> Timeouts:
    """A restarted process may take as long to be ready as the supervisor gives it."""
    start = supervisor.settings.policy.start_timeout
    return Timeouts(ready_s=start)


def _unknown_revision(name: str, revision: int) -> Target:
    raise LookupError(f"{name}: revision {revision} cannot be loaded here")


__all__ = ["ControlService", "SupervisorError", "UpstreamError", "asyncio"]
