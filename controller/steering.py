"""Steering a running deployment without a new revision: an instance moved between prefill
and decode (a rollout of one step, on engines pdctl started or attached ones), and the proxy
verbs (pause, release, drain, undrain), each recorded as an event."""

from __future__ import annotations

from typing import Any

from controller.attached import flags_as
from controller.clients.proxy_admin import ProxyAdminClient
from controller.recorder import Recorder, reason_suffix
from controller.rollout.engine import ACTOR, Goal, RolloutEngine, Target
from controller.spec.deployment import DeploymentSpec
from controller.supervise.supervisor import Supervisor
from controller.switch.attached_steer import (
    NoProxy,
    instance_urls,
    move_where,
    pdctl_proxy,
    probe_pd_role,
)
from controller.switch.plan import Step, StepKind
from controller.switch.proxy_steer import check_target, steer
from controller.switch.role_move import Move, RoleMoveFailed, RoleMover, move_at, plan_move
from domain.errors import InvalidTransition


class Steering:
    def __init__(self, supervisor: Supervisor, record: Recorder, rollouts: RolloutEngine) -> None:
        self.supervisor, self.record, self.rollouts = supervisor, record, rollouts
        self.role_moves = RoleMover(supervisor, record)  # controller/switch/role_move.py

    def known(self, name: str) -> bool:
        return name in self.supervisor.deployments

    async def move_role(
        self, name: str, spec: DeploymentSpec, instance: str, role: str, **how: Any
    ) -> dict[str, Any]:
        """Move one instance between prefill and decode (controller/switch/role_move.py) as a
        rollout of one step; `how`: store, actor, reason, drain_timeout_s, and for an
        attached deployment force and proxy_token (controller/switch/attached_steer.py)."""
        move = plan_move(spec, instance, role)  # the input first: 422s name the field
        force, token = how.pop("force", False), how.pop("proxy_token", None)
        if spec.attached:
            return await self._move_attached(spec, move, force, token, **how)
        if not self.known(name):
            raise InvalidTransition(f"deployment {name!r} has not been started")
        await self.rollouts.let_start_end(name)
        self.rollouts.refuse_if_running(name, "move a role")
        dep = self.supervisor.deployments[name]
        unit = dep.units.get(instance)
        if unit is None or unit.machine.state.name != "RUNNING":
            raise InvalidTransition(f"{name}/{instance} is not running: start it first")
        result: dict[str, Any] = {}

        async def mover(step: Step) -> None:
            running = self.rollouts.active(name)
            rollout_id = int(running.id) if running is not None else None
            result.update(await self.role_moves.move(name, move, rollout_id=rollout_id, **how))

        target = Target(dep.revision or 0, spec, dep.ports)
        goal = Goal(
            name,
            target,
            "role_move",
            how.get("actor", ACTOR),
            how.get("reason"),
            strategy="in-place",
            steps=[Step(StepKind.ROLE_MOVE, (instance,))],
            settles=False,
            auto_rollback=False,
            mover=mover,
        )
        await self.rollouts.begin(goal)
        rec = await self.rollouts.wait(name)
        if rec is None or rec.state != "done" or not result:
            raise RoleMoveFailed((rec.error if rec else None) or f"{name}/{instance}: not moved")
        return result

    async def _move_attached(
        self, spec: DeploymentSpec, move: Move, force: bool, token: str | None, **how: Any
    ) -> dict[str, Any]:
        """A role move on engines pdctl did not start: probed for /v1/pd_role first, drained
        at the proxy when it is pdctl's, recorded as a rollout of one step like any move."""
        name = spec.name
        await self.rollouts.let_start_end(name)
        self.rollouts.refuse_if_running(name, "move a role")
        where, warning = move_where(spec, move, force, token)
        await probe_pd_role(spec, move, where.url, flags_as(spec, move.target.value, where.url))
        result: dict[str, Any] = {}

        async def mover(step: Step) -> None:
            running = self.rollouts.active(name)
            result.update(
                await move_at(
                    where,
                    move,
                    how["store"],
                    self.record,
                    actor=how.get("actor", ACTOR),
                    reason=how.get("reason"),
                    drain_timeout_s=how["drain_timeout_s"],
                    rollout_id=int(running.id) if running is not None else None,
                )
            )

        current = how["store"].get(name)
        goal = Goal(
            name,
            Target(current.revision, spec, current.ports),
            "role_move",
            how.get("actor", ACTOR),
            how.get("reason"),
            strategy="in-place",
            steps=[Step(StepKind.ROLE_MOVE, (move.instance,))],
            settles=False,
            auto_rollback=False,
            mover=mover,
            admin=NoProxy() if where.admin is None else where.admin,
        )
        rec = await self.rollouts.begin(goal)
        done = await self.rollouts.wait(name)
        if done is None or done.state != "done" or not result:
            raise RoleMoveFailed((done.error if done else None) or f"{name}: not moved")
        return {**result, "rollout": rec.id, **({"warning": warning} if warning else {})}

    async def steer_proxy(
        self,
        spec: DeploymentSpec,
        verb: str,
        *,
        instance: str | None,
        group: str | None,
        actor: str,
        reason: str | None,
        proxy_token: str | None = None,
    ) -> dict[str, Any]:
        """Pause or release a proxy group, drain or undrain an instance, at the deployment's
        pdctl proxy (controller/switch/proxy_steer.py), recorded as an event."""
        name = spec.name
        if spec.attached:
            admin = pdctl_proxy(spec, proxy_token, verb)  # first: a 409 when it is not pdctl's
            self.rollouts.refuse_if_running(name, verb)  # a move steers its proxy itself
            urls = instance_urls(spec)
            check_target(verb, instance, group, urls)
        else:
            if not self.known(name) or self.supervisor.proxy_url(name) is None:
                raise InvalidTransition(f"deployment {name!r} has not been started")
            self.rollouts.refuse_if_running(name, verb)  # a rollout steers its proxy itself
            dep = self.supervisor.deployments[name]
            urls = {n: u.launch.url for n, u in dep.units.items() if n != "proxy"}
            check_target(verb, instance, group, urls)
            admin = ProxyAdminClient(
                self.supervisor.proxy_url(name) or "", lambda: self.supervisor.admin_token(name)
            )
        done = await steer(admin, verb, instance, group, urls.get(instance or ""))
        what = instance if instance is not None else ", ".join(done.get("groups", []))
        self.record(
            actor,
            f"proxy.{verb}",
            f"{name}: {verb} {what} at its proxy" + reason_suffix(reason),
            name,
            done,
        )
        return done
