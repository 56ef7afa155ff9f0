"""Move one running instance between prefill and decode without a restart (runtime P/D role
switching, controller/spec/sections/role_switch.py), losing no request:

    1. the target revision is written, in progress (`role_switch.serving` names the move)
    2. the proxy drains the instance (no new legs) and its outstanding legs finish there
    3. the instance is asked to change role (POST /v1/pd_role with its current epoch) and
       read until it serves the new role, `ready`, at the next epoch
    4. the proxy is told its new role (it reads the new epoch itself) and undrains it
    5. the revision is settled applied; the supervisor keeps the new launch (no restart)

Any step that fails leaves the instance undrained in the role it serves, and settles the
revision failed, naming the step. `plan_move` (pure) holds the input checks, each a 422
naming its field.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from controller.clients.proxy_admin import ProxyAdminClient, ProxyAdminError
from controller.spec.deployment import DeploymentSpec, InstanceGroup
from controller.spec.sections.role_switch import (
    RoleSwitch,
    instance_roles,
    role_switchers,
    switches_roles,
)
from controller.supervise.supervisor import Supervisor
from domain.errors import ConfigError, InvalidTransition, UpstreamError
from domain.modes import Role
from domain.names import did_you_mean

POLL_S = 0.05
ROLE_CALL_TIMEOUT_S = 5.0


class MoveStore(Protocol):
    def begin_change(
        self,
        name: str,
        spec: Any,
        actor: str,
        reason: str | None,
        kind: str,
        *,
        rollout_id: int | None = None,
    ) -> int: ...

    def settle_change(self, name: str, revision: int, state: str, detail: str | None) -> None: ...


class RoleMoveFailed(UpstreamError):
    """A step of a move failed; the revision is settled failed and the message names the step."""


@dataclass(frozen=True, slots=True)
class Move:
    instance: str
    source: Role
    target: Role
    spec: DeploymentSpec  # the target revision's spec


def plan_move(spec: DeploymentSpec, instance: str, role: str) -> Move:
    """The target spec of moving `instance` to `role`; a ConfigError naming the field when
    the move cannot be made."""
    if not switches_roles(spec.connector):
        raise ConfigError.at(
            ("instance",),
            f"deployment {spec.name!r} uses connector {spec.connector or 'none'}: runtime "
            f"role switching needs {role_switchers()} (spec field connector)",
        )
    if spec.role_switch is None and not spec.attached:  # attached: its engines tell (probed)
        raise ConfigError.at(
            ("instance",),
            f"deployment {spec.name!r} was not started for runtime role switching: set "
            "role_switch: {} in its spec (a new revision, restarted once) first",
        )
    roles = instance_roles(spec)
    if instance not in roles:
        known = ", ".join(roles) or "none"
        raise ConfigError.at(
            ("instance",),
            f"no instance {instance!r} here (instances: {known}){did_you_mean(instance, roles)}",
        )
    if role not in (Role.PREFILL.value, Role.DECODE.value):
        raise ConfigError.at(("role",), f"role must be prefill or decode, got {role!r}")
    source, target = roles[instance], Role(role)
    if source == target:
        raise ConfigError.at(("role",), f"{instance} already serves {role}")
    if sum(1 for r in roles.values() if r == source) < 2:
        raise ConfigError.at(
            ("instance",), f"{instance} is the last {source} instance: the deployment needs one"
        )
    serving = dict(spec.role_switch.serving) if spec.role_switch is not None else {}
    if target == _group_of(spec, instance).role:
        serving.pop(instance, None)  # back in its group's role: no override left
    else:
        serving[instance] = target
    new = spec.model_copy(update={"role_switch": RoleSwitch(serving=serving)})
    return Move(instance, source, target, new)


def _group_of(spec: DeploymentSpec, instance: str) -> InstanceGroup:
    return next(g for g in spec.groups if instance in {f"{g.name}-{i}" for i in range(g.count)})


class RoleMover:
    """Performs moves for the control service: the supervisor knows URLs and tokens."""

    def __init__(self, supervisor: Supervisor, record: Any) -> None:
        self.supervisor, self.record = supervisor, record
        self._busy: set[str] = set()

    def busy(self, name: str) -> bool:
        """Whether a move of `name` is under way."""
        return name in self._busy

    async def move(
        self,
        name: str,
        move: Move,
        store: MoveStore,
        actor: str,
        reason: str | None,
        drain_timeout_s: float,
        rollout_id: int | None = None,
    ) -> dict[str, Any]:
        """`rollout_id`: the rollout this move is a step of (it may write the revision)."""
        dep = self.supervisor.deployments.get(name)
        unit = dep.units.get(move.instance) if dep is not None else None
        if dep is None or unit is None or unit.machine.state.name != "RUNNING":
            raise InvalidTransition(f"{name}/{move.instance} is not running: start it first")
        if name in self._busy:
            raise InvalidTransition(f"a role move of {name!r} is already under way")
        self._busy.add(name)
        try:
            return await self._move(name, move, store, actor, reason, drain_timeout_s, rollout_id)
        finally:
            self._busy.discard(name)

    async def _move(
        self, name, move: Move, store, actor, reason, drain_timeout_s, rollout_id
    ) -> dict:
        dep = self.supervisor.deployments[name]
        admin = ProxyAdminClient(
            self.supervisor.proxy_url(name) or "", lambda: self.supervisor.admin_token(name)
        )
        where = MoveAt(name, dep.units[move.instance].launch.url, admin)
        return await move_at(
            where,
            move,
            store,
            self.record,
            actor=actor,
            reason=reason,
            drain_timeout_s=drain_timeout_s,
            rollout_id=rollout_id,
            on_moved=lambda revision: self.supervisor.keep_all(name, move.spec, revision),
        )


@dataclass(frozen=True, slots=True)
class MoveAt:
    """Where a move happens: the instance's URL and the proxy that routes to it (None: no
    proxy pdctl can steer; the engine's own fence is all that holds new requests off)."""

    name: str
    url: str
    admin: ProxyAdminClient | None


async def move_at(
    where: MoveAt,
    move: Move,
    store: MoveStore,
    record: Any,
    *,
    actor: str,
    reason: str | None,
    drain_timeout_s: float,
    rollout_id: int | None,
    on_moved: Callable[[int], None] = lambda revision: None,
) -> dict[str, Any]:
    """The move's steps (the module's docstring), its revision begun and settled, its event
    recorded; an abort (the rollout cancelled) undrains the instance and settles it failed."""
    name, url, admin = where.name, where.url, where.admin
    what = f"{name}/{move.instance}: {move.source} -> {move.target}"
    revision = store.begin_change(
        name, move.spec, actor, reason, kind="role_move", rollout_id=rollout_id
    )
    started, step, state = time.monotonic(), "drain at the proxy", None
    try:
        async with aiohttp.ClientSession() as session:
            if admin is not None:
                await admin.drain(url)
                await _legs_done(admin, url, drain_timeout_s)
            step = "change role on the instance"
            state = await _change_role(session, url, move.target, drain_timeout_s)
            if admin is not None:
                step = "route to its new role"
                await admin.add(url, move.target.value)
                await admin.undrain(url)
    except (ProxyAdminError, RoleMoveFailed, aiohttp.ClientError, TimeoutError) as exc:
        detail = f"{what}: {step} failed: {exc}"
        await _give_up(where, store, revision, detail)
        record(actor, "deployment.role_move_failed", detail, name, {"revision": revision})
        raise RoleMoveFailed(detail) from None
    except asyncio.CancelledError:  # aborted: routed again as it was, the revision failed
        detail = f"{what}: aborted at {step}"
        await _give_up(where, store, revision, detail)
        record(actor, "deployment.role_move_failed", detail, name, {"revision": revision})
        raise
    if admin is not None:
        await admin.aclose()
    on_moved(revision)
    store.settle_change(name, revision, "applied", None)
    seconds = round(time.monotonic() - started, 3)
    facts = {"revision": revision, "instance": move.instance, "epoch": state["epoch"]}
    record(actor, "deployment.role_move", f"{what} (revision {revision})", name, facts)
    return {**facts, "from": move.source.value, "to": move.target.value, "seconds": seconds}


async def _give_up(where: MoveAt, store: MoveStore, revision: int, detail: str) -> None:
    if where.admin is not None:
        await _undrain_quietly(where.admin, where.url)
        await where.admin.aclose()
    store.settle_change(where.name, revision, "failed", detail)


async def _legs_done(admin: ProxyAdminClient, url: str, timeout_s: float) -> None:
    """The proxy's legs on `url` all ended (decode reservations waiting on a prefill too)."""
    deadline = time.monotonic() + timeout_s
    while True:
        entry = next((e for e in await admin.instances() if e["url"] == url), None)
        if entry is None or not entry.get("outstanding_requests"):
            return
        if time.monotonic() > deadline:
            raise RoleMoveFailed(f"legs still running on {url} after {timeout_s:g} s")
        await asyncio.sleep(POLL_S)


async def _change_role(
    session: aiohttp.ClientSession, url: str, role: Role, drain_timeout_s: float
) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=ROLE_CALL_TIMEOUT_S)
    before = await _read_role(session, url, timeout)
    body = {"role": role.value, "expected_epoch": before["epoch"], "drain_timeout": drain_timeout_s}
    async with session.post(url + "/v1/pd_role", json=body, timeout=timeout) as r:
        if r.status != 202:
            raise RoleMoveFailed(f"POST /v1/pd_role answered {r.status}: {(await r.text())[:200]}")
    deadline = time.monotonic() + drain_timeout_s + ROLE_CALL_TIMEOUT_S
    while time.monotonic() < deadline:
        state = await _read_role(session, url, timeout)
        moved = state["phase"] == "ready" and state["epoch"] > before["epoch"]
        if moved and state["role"] == role.value:
            return state
        if state["phase"] == "failed" or (
            state["phase"] == "ready" and state.get("error") and state["epoch"] == before["epoch"]
        ):
            raise RoleMoveFailed(f"the instance answered {state['phase']}: {state.get('error')}")
        await asyncio.sleep(POLL_S)
    raise RoleMoveFailed(f"not ready in its new role within {drain_timeout_s:g} s")


async def _read_role(session: aiohttp.ClientSession, url: str, timeout) -> dict[str, Any]:
    async with session.get(url + "/v1/pd_role", timeout=timeout) as r:
        if r.status != 200:
            raise RoleMoveFailed(f"GET /v1/pd_role answered {r.status}: it does not switch roles")
        state = await r.json(content_type=None)
    if not isinstance(state, dict) or not isinstance(state.get("epoch"), int):
        raise RoleMoveFailed(f"GET /v1/pd_role answered {str(state)[:120]}")
    return state


async def _undrain_quietly(admin: ProxyAdminClient, url: str) -> None:
    with contextlib.suppress(ProxyAdminError):  # down: its restart routes to all again
        await admin.undrain(url)
