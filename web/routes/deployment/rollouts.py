"""/api/deployments/{name}/rollout...: watch, abort and undo the changes to a running
deployment, as `kubectl rollout status|undo` spells them (controller/rollout/engine.py).

GET  /rollout          the rollout running (else the last) and each process's truth: the
                       revision it runs, the one desired, whether it drifted and why
GET  /rollouts         every rollout of the deployment, newest first (they outlive restarts)
GET  /rollouts/{id}    one rollout
POST /rollout/abort    stop the running rollout where it is, then roll back
POST /rollout/undo     an earlier revision ({"to_revision": N}, default the applied one
                       before the desired one) as a new revision, rolled out
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, status
from pydantic import BaseModel, ConfigDict, Field

from services import rollouts
from web.deps import INT64_MAX, ControllerDep, Operator, Reason, ServiceDep, StoreDep
from web.errors import NotFound

router = APIRouter(prefix="/deployments/{name}", tags=["rollouts"])


class UndoRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    to_revision: int | None = Field(
        None,
        ge=1,
        le=INT64_MAX,
        description="The revision to go back to (default: the applied one before).",
    )
    reason: str | None = Field(None, max_length=500, description="Kept with the change.")
    strategy: str | None = Field(
        None,
        pattern="^(roll|hold|recreate)$",
        description="roll, hold or recreate (default: roll where the layout allows it).",
    )


@router.get("/rollout")
async def rollout_status(name: str, store: StoreDep, controller: ControllerDep) -> dict[str, Any]:
    """The rollout running now, else the last one, and the truth of every process."""
    return rollouts.status(store, controller, name)


@router.get("/rollouts")
async def rollout_history(
    name: str,
    store: StoreDep,
    controller: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[dict[str, Any]]:
    store.get(name)
    return [r.to_json() for r in controller.rollouts.history(name, limit)]


@router.get("/rollouts/{rollout_id}")
async def one_rollout(
    name: str, rollout_id: str, store: StoreDep, controller: ServiceDep
) -> dict[str, Any]:
    store.get(name)
    found = controller.rollouts.find(name, rollout_id)
    if found is None:
        raise NotFound(f"no rollout {rollout_id!r} of {name!r}")
    return found.to_json()


@router.post("/rollout/abort", status_code=status.HTTP_202_ACCEPTED)
async def abort(
    name: str, store: StoreDep, controller: ServiceDep, actor: Operator, reason: Reason = None
) -> dict[str, Any]:
    """Stop the running rollout where it is: routing is put back and it rolls back to the
    last applied revision. 409 when none runs."""
    store.get(name)
    rec = await controller.abort(name, actor.label, reason)
    return rec.to_json()


@router.post("/rollout/undo", status_code=status.HTTP_202_ACCEPTED)
async def undo(
    name: str,
    store: StoreDep,
    controller: ServiceDep,
    actor: Operator,
    body: UndoRequest | None = None,
) -> dict[str, Any]:
    """An earlier revision's spec as a new revision, rolled out (409 while a rollout runs,
    or when the deployment is not running; 404 for a revision it never had)."""
    body = body or UndoRequest()
    store.get(name)  # an unknown name is a 404 (with its "did you mean"), not "not running"
    done = await rollouts.undo(
        store,
        controller,
        name,
        actor.label,
        body.reason,
        to_revision=body.to_revision,
        strategy=body.strategy,
    )
    rec = done.rollout
    return {
        "deployment": name,
        "revision": done.current.revision,
        "rollout": rec.to_json() if rec is not None else None,
    }
