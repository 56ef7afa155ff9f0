"""/api/deployments/{name}/...: start, stop, restart, status, logs, commands, mode switches."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, status
from pydantic import BaseModel, ConfigDict, Field

from controller import ControlService, StoreRevisions, SwitchRecord, from_revision, revision_of
from domain.modes import TransferModeName
from state.models import Revision
from web.deps import Operator, Reason, ServiceDep, StoreDep
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


@router.post("/start", status_code=status.HTTP_202_ACCEPTED)
async def start(
    name: str, controller: ServiceDep, store: StoreDep, actor: Operator, reason: Reason = None
) -> list[dict[str, Any]]:
    current = store.get(name)
    await controller.start(name, current.spec, current.ports, actor.label, reason, current.revision)
    return controller.status(name)


@router.post("/stop", status_code=status.HTTP_202_ACCEPTED)
async def stop(
    name: str, controller: ServiceDep, store: StoreDep, actor: Operator, reason: Reason = None
) -> list[dict[str, Any]]:
    store.get(name)
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
) -> list[dict[str, Any]]:
    store.get(name)
    _known(controller, name)
    await controller.restart(name, instance, actor.label, reason)
    return controller.status(name)


@router.get("/status")
def instance_status(name: str, controller: ServiceDep, store: StoreDep) -> list[dict[str, Any]]:
    store.get(name)
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
    the background; poll /switches/{id} for its progress."""
    current = store.get(name)
    record = controller.switch(
        name,
        current.spec,
        current.ports,
        body.mode,
        body.strategy,
        actor.label,
        body.reason,
        StoreRevisions(store),
    )
    return record.to_json()


@router.get("/switch/forecast")
def switch_forecast(
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
def switches(name: str, controller: ServiceDep, store: StoreDep) -> list[dict[str, Any]]:
    """This plane's switches of `name`, and one still in progress that no runner here runs
    (the control plane restarted during it)."""
    store.get(name)
    history = controller.switches.history(name)
    number = store.in_progress(name)
    if number is not None and number not in {r.revision for r in history}:
        orphan = _from_store(name, store.revision(name, number))
        history = [orphan, *history] if orphan is not None else history
    return [r.to_json() for r in history]


@router.get("/switches/{switch_id}")
def switch_status(
    name: str, switch_id: str, controller: ServiceDep, store: StoreDep
) -> dict[str, Any]:
    store.get(name)
    record = controller.switches.find(name, switch_id) or _stored(store, name, switch_id)
    if record is None:
        raise NotFound(f"no switch {switch_id!r} of {name!r}")
    return record.to_json()


def _stored(store: StoreDep, name: str, switch_id: str) -> SwitchRecord | None:
    """A switch as its revision is stored (the runner that ran it is gone)."""
    number = revision_of(switch_id)
    if number is None:
        return None
    try:
        return _from_store(name, store.revision(name, number))
    except NotFound:
        return None


def _from_store(name: str, rev: Revision) -> SwitchRecord | None:
    started = rev.created_at.timestamp() if rev.created_at else 0.0
    return from_revision(name, rev.number, rev.state, rev.actor, rev.reason, started)
