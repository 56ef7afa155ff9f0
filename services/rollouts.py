"""Stored revisions as the rollout engine takes them, and the changes the API, the pages and
the advisor make to a running deployment: each a revision, rolled out by the controller's one
engine (controller/rollout/), or stored pending when the operator says so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller import ControlService, DeploymentSpec, RolloutRecord, Target, attach_refusal
from domain.errors import ConfigError, InvalidTransition
from state.changes import RevisionState
from state.errors import Unreadable
from state.store import Current, Store


@dataclass(frozen=True, slots=True)
class Applied:
    """What storing a revision did: the deployment as stored and the rollout it began."""

    current: Current
    rollout: RolloutRecord | None  # None: stored pending, or nothing runs to roll out to


def target(store: Store, name: str, number: int) -> Target:
    """Revision `number` of `name`, typed (NotFound, or Unreadable: a 409 naming the field)."""
    row = store.revision(name, number)
    spec, ports = store.rules.load(row.spec, row.ports)
    return Target(number, spec, ports)


def desired(store: Store, name: str) -> Target:
    current = store.get(name)
    return Target(current.revision, current.spec, current.ports)


def last_applied(store: Store, name: str, below: int | None = None) -> Target | None:
    """The newest applied revision (below `below`): where a failed rollout goes back to."""
    for row in store.revisions(name):  # newest first
        if row.state == RevisionState.APPLIED.value and (below is None or row.number < below):
            try:
                return target(store, name, row.number)
            except Exception:  # unreadable today: an older one may still be
                continue
    return None


def running(controller: ControlService | None, name: str) -> bool:
    return controller is not None and controller.is_active(name)


async def roll_out(
    store: Store,
    controller: ControlService,
    name: str,
    number: int,
    kind: str,
    actor: str,
    reason: str | None,
    strategy: str | None = None,
    auto_rollback: bool = True,
) -> RolloutRecord:
    """Revision `number` (stored pending) becomes the one in progress and is rolled out; if
    the rollout cannot even begin, the revision is settled failed, saying why."""
    back = last_applied(store, name, below=number)
    store.begin_stored(name, number, actor, reason, kind)
    try:
        return await controller.apply(
            name,
            target(store, name, number),
            kind,
            actor,
            reason,
            back=back,
            strategy=strategy,
            auto_rollback=auto_rollback,
        )
    except Exception as exc:
        store.settle_change(name, number, "failed", f"not rolled out: {exc}"[:400])
        raise


async def store_and_roll_out(
    store: Store,
    controller: ControlService | None,
    name: str,
    spec: DeploymentSpec,
    actor: str,
    reason: str | None,
    *,
    based_on: int | None = None,
    kind: str = "apply",
    rollout: bool = True,
    strategy: str | None = None,
) -> Applied:
    """Store `spec` as the next revision. On a running deployment it is pending, then (with
    `rollout`) rolled out; on a stopped one it is what the next start runs. On an attached
    deployment (nothing pdctl runs), a change to its engines' flags is refused unless
    `rollout` is off: pdctl cannot restart them; the 409 says what the operator would run."""
    refuse_attached_apply(store, name, spec, kind, rollout)
    live = running(controller, name)
    if live and controller is not None:
        await controller.rollouts.let_start_end(name)
        controller.rollouts.refuse_if_running(name)
    # Pending until a rollout (running) or the next start (stopped) has all of it ready; an
    # attached deployment's edit records what its operator runs already.
    pending = not spec.attached
    saved = store.update(name, spec, actor, reason, based_on=based_on, pending=pending)
    if not live or controller is None or saved.state != RevisionState.PENDING.value:
        return Applied(saved, None)
    if not rollout:
        return Applied(saved, None)
    rec = await roll_out(store, controller, name, saved.revision, kind, actor, reason, strategy)
    return Applied(store.get(name), rec)


def refuse_attached_apply(
    store: Store, name: str, spec: DeploymentSpec, kind: str, rollout: bool
) -> None:
    """An apply that would restart an attached deployment's engines: a 409 naming the flags.
    With `rollout` off the operator records what they run (they restarted it themselves)."""
    if not rollout:
        return
    try:
        now = store.get(name).spec
    except Unreadable:  # a broken stored revision: the edit that replaces it is the fix
        return
    if not now.attached:
        return
    refusal = attach_refusal(name, "proposal" if kind == "advisor" else "apply", now, spec)
    if refusal.commands:
        raise refusal


async def undo(
    store: Store,
    controller: ControlService,
    name: str,
    actor: str,
    reason: str | None,
    to_revision: int | None = None,
    strategy: str | None = None,
) -> Applied:
    """`kubectl rollout undo`: an earlier revision's spec as a new revision, rolled out. The
    default is the applied revision before the one desired now."""
    if not running(controller, name):
        raise InvalidTransition(f"deployment {name!r} is not running: edit it, or start it")
    await controller.rollouts.let_start_end(name)
    controller.rollouts.refuse_if_running(name, "undo")
    now = store.get(name)
    if to_revision is None:
        earlier = last_applied(store, name, below=now.revision)
        if earlier is None:
            raise InvalidTransition(
                f"deployment {name!r} has no applied revision before {now.revision} to go back to"
            )
        to_revision = earlier.revision
    if to_revision == now.revision:
        raise ConfigError.at(
            ("to_revision",), f"revision {to_revision} is the one desired now: nothing to undo"
        )
    old = target(store, name, to_revision)
    why = f"undo to revision {to_revision}" + (f": {reason}" if reason else "")
    return await store_and_roll_out(
        store, controller, name, old.spec, actor, why, kind="undo", strategy=strategy
    )


def status(store: Store, controller: ControlService | None, name: str) -> dict[str, Any]:
    """The rollout an operator watches (the one running, else the last) and the truth of
    each process: the revision it runs, the one desired, drift and why."""
    current = store.get(name)
    want = Target(current.revision, current.spec, current.ports)
    last = controller.rollouts.last(name) if controller is not None else None
    truth = controller.drift(name, want) if controller is not None else []
    settled = current.state
    live = bool(truth) and any(t["state"] not in ("STOPPED", "NOT STARTED") for t in truth)
    drifted = [t["name"] for t in truth if t["drifted"]]
    return {
        "deployment": name,
        "desired_revision": current.revision,
        "revision_state": settled,
        "running": live,
        "applied": live and not drifted and all(t["state"] == "RUNNING" for t in truth),
        "drifted": drifted,
        "rollout": last.to_json() if last is not None else None,
        "instances": truth,
    }
