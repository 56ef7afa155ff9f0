"""/api/deployments/{name}/...: start, stop, restart, status, logs, commands, mode switches."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, status
from pydantic import BaseModel, ConfigDict, Field

from controller import ControlService, StoreRevisions, attach_refusal
from domain.modes import TransferModeName
from observe.attached.watch import attached_status
from services.rollouts import desired, last_applied, roll_out
from state.changes import RevisionState
from state.store import Store
from web.deps import ObserverDep, Operator, Reason, ServiceDep, StoreDep, StrategyQuery
from web.errors import InvalidTransition, NotFound

router = APIRouter(prefix="/deployments/{name}", tags=["lifecycle"])


class SwitchRequest(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    mode: TransferModeName
    strategy: Literal["roll", "hold", "keep-serving"] = Field(
        description="roll: one pair at a time while others serve (two or more pairs); hold: "
        "pause dispatch, restart both sides, release; keep-serving: whole requests on the "
        "side that is not restarting."
    )
    reason: str = Field(
        min_length=1, max_length=500, description="Why: recorded with the switch and its events."
    )


def _known(controller: ControlService, name: str) -> None:
    if not controller.known(name):
        raise InvalidTransition(f"deployment {name!r} has not been started")


def _refuse_attached(store: Store, name: str, verb: str, mode: str | None = None) -> None:
    """pdctl owns no process of an attached deployment: a 409 saying what to run instead."""
    spec = store.get(name).spec
    if spec.attached:
        target = None
        if mode is not None:
            groups = [g.model_copy(update={"mode": mode}) for g in spec.groups]
            target = spec.model_copy(update={"groups": groups})
        raise attach_refusal(name, verb, spec, target)


@router.post("/start", status_code=status.HTTP_202_ACCEPTED)
async def start(
    name: str, controller: ServiceDep, store: StoreDep, actor: Operator, reason: Reason = None
) -> list[dict[str, Any]]:
    """Start every process at the desired revision; a rollout of kind start follows them
    until all are ready (GET .../rollout)."""
    _refuse_attached(store, name, "start")
    current = store.get(name)
    pending = current.state == RevisionState.PENDING.value
    await controller.start(
        name,
        current.spec,
        current.ports,
        actor.label,
        reason,
        current.revision,
        pending=pending,
    )
    return controller.status(name)


@router.post("/stop", status_code=status.HTTP_202_ACCEPTED)
async def stop(
    name: str, controller: ServiceDep, store: StoreDep, actor: Operator, reason: Reason = None
) -> list[dict[str, Any]]:
    _refuse_attached(store, name, "stop")
    _known(controller, name)
    await controller.stop(name, actor.label, reason)
    return controller.status(name)


@router.post("/restart", status_code=status.HTTP_202_ACCEPTED)
async def restart(
    name: str,
    controller: ServiceDep,
    store: StoreDep,
    actor: Operator,
    instance: Annotated[str | None, Query(max_length=80)] = None,
    reason: Reason = None,
    strategy: StrategyQuery = None,
) -> list[dict[str, Any]]:
    """Converge to the desired revision as a rollout: what drifted (or is unhealthy)
    restarts, on the desired revision's placement; a pending revision is rolled out. With
    nothing drifted, every instance (or `instance`) restarts, one pair at a time where the
    layout allows it."""
    _refuse_attached(store, name, "restart")
    current = store.get(name)
    _known(controller, name)
    if current.state == RevisionState.PENDING.value and instance is None:
        await roll_out(
            store, controller, name, current.revision, "apply", actor.label, reason, strategy
        )
    else:
        await controller.restart(
            name, instance, actor.label, reason, desired(store, name), strategy=strategy
        )
    return controller.status(name)


@router.get("/status")
def instance_status(
    name: str, controller: ServiceDep, store: StoreDep, observer: ObserverDep
) -> list[dict[str, Any]]:
    """Each process's status row; an attached deployment's instances at their addresses, as
    the observer last found them (observe/attached/watch.py)."""
    spec = store.get(name).spec
    if spec.attached:
        return attached_status(spec, observer.frame(name) if observer is not None else None)
    return controller.status(name)


@router.get("/logs/{instance}")
def log_tail(
    name: str,
    instance: str,
    controller: ServiceDep,
    store: StoreDep,
    lines: Annotated[int, Query(ge=1, le=5000)] = 200,
) -> dict[str, Any]:
    store.get(name)
    _known(controller, name)
    return {"instance": instance, "lines": controller.log_tail(name, instance, lines)}


@router.get("/commands")
def commands(name: str, controller: ServiceDep, store: StoreDep) -> dict[str, dict[str, Any]]:
    """Exactly what runs for each process, and the `vllm serve` line an operator would type."""
    current = store.get(name)
    return controller.preview(current.spec, current.ports)


@router.post("/switch", status_code=status.HTTP_202_ACCEPTED)
async def switch(
    name: str, body: SwitchRequest, controller: ServiceDep, store: StoreDep, actor: Operator
) -> dict[str, Any]:
    """Write the target revision (in progress), then begin a zero-loss read/write switch in
    the background, as a rollout; poll /switches/{id} (or /rollout) for its progress."""
    _refuse_attached(store, name, "switch", body.mode)
    current = store.get(name)
    record = await controller.switch(
        name,
        current.spec,
        current.ports,
        body.mode,
        body.strategy,
        actor.label,
        body.reason,
        StoreRevisions(store),
        back=last_applied(store, name),
    )
    return record.to_json()


@router.get("/switch/forecast")
async def switch_forecast(
    name: str,
    controller: ServiceDep,
    store: StoreDep,
    mode: TransferModeName,
    rate: Annotated[float | None, Query(gt=0, le=100_000, description="Requests/s")] = None,
) -> dict[str, Any]:
    """Each strategy's forecast for switching to `mode`: duration, hold and degraded windows,
    the start times they rest on (measured, else modelled) and warnings when a strategy cannot
    keep its promise (a hold longer than the proxy's hold deadline answers 503)."""
    current = store.get(name)
    return controller.switch_preview(name, current.spec, mode, rate)


@router.get("/switches")
async def switches(name: str, controller: ServiceDep, store: StoreDep) -> list[dict[str, Any]]:
    """This deployment's mode switches, oldest first; kept in the store, so a control plane
    that restarted still shows them."""
    store.get(name)
    return [r.to_json() for r in controller.switches(name)]


@router.get("/switches/{switch_id}")
async def switch_status(
    name: str, switch_id: str, controller: ServiceDep, store: StoreDep
) -> dict[str, Any]:
    store.get(name)
    record = controller.rollouts.find(name, switch_id)
    if record is None or record.kind != "switch":
        raise NotFound(f"no switch {switch_id!r} of {name!r}")
    return record.to_json()
