"""/api/deployments: create, list, read, replace (a new revision), delete, clone."""

from __future__ import annotations

from fastapi import APIRouter, status

from controller.deployment import DeploymentSpec
from web.deps import ControllerDep, Operator, Reason, StoreDep, Viewer
from web.errors import Conflict
from web.schemas import CloneRequest, DeploymentOut

router = APIRouter(prefix="/deployments", tags=["deployments"])


@router.get("")
def list_deployments(store: StoreDep, actor: Viewer) -> list[DeploymentOut]:
    """Secret-looking env values and args are masked for viewers (operators see them)."""
    return [DeploymentOut.of(d, actor.may_change) for d in store.deployments()]


@router.post("", status_code=status.HTTP_201_CREATED)
def create_deployment(
    spec: DeploymentSpec, store: StoreDep, actor: Operator, reason: Reason = None
) -> DeploymentOut:
    return DeploymentOut.of(store.create(spec, actor.label, reason))


@router.get("/{name}")
def get_deployment(name: str, store: StoreDep, actor: Viewer) -> DeploymentOut:
    """Secret-looking env values and args are masked for viewers (operators see them)."""
    return DeploymentOut.of(store.get(name), actor.may_change)


@router.put("/{name}")
def replace_deployment(
    name: str, spec: DeploymentSpec, store: StoreDep, actor: Operator, reason: Reason = None
) -> DeploymentOut:
    """Store `spec` as the deployment's next revision (no new revision if nothing changed)."""
    return DeploymentOut.of(store.update(name, spec, actor.label, reason))


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_deployment(
    name: str, store: StoreDep, controller: ControllerDep, actor: Operator, reason: Reason = None
) -> None:
    if controller is not None and controller.is_active(name):
        raise Conflict(f"deployment {name!r} has running instances: stop it first")
    store.delete(name, actor.label, reason)


@router.post("/{name}/clone", status_code=status.HTTP_201_CREATED)
def clone_deployment(
    name: str, body: CloneRequest, store: StoreDep, actor: Operator, reason: Reason = None
) -> DeploymentOut:
    """A new deployment from this one's current revision; its explicit ports are dropped and
    fresh ones allocated, since two deployments cannot share ports."""
    return DeploymentOut.of(store.clone(name, body.name, actor.label, reason))
