"""/api/deployments: create, list, read, replace (a new revision), delete, clone.

A deployment's ETag is its revision (`"3"`); a PUT with `If-Match` (or `revision` in the
body) is stored only if that is still the current revision, so two edits made from the same
revision cannot both win: the second gets 409 naming the revision it was made from and the
current one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status

from controller import DeploymentSpec, Target
from services.rollouts import running, store_and_roll_out
from web.deps import ControllerDep, Operator, Reason, StoreDep, StrategyQuery, Viewer
from web.errors import BadRequest, InvalidTransition
from web.schemas import CloneRequest, DeploymentEdit, DeploymentOut

router = APIRouter(prefix="/deployments", tags=["deployments"])

DryRun = Annotated[
    bool,
    Query(
        description="Check everything and answer with the deployment as it would be "
        "(its next revision, ports allocated), storing nothing."
    ),
]


@router.get("")
def list_deployments(store: StoreDep, actor: Viewer) -> list[DeploymentOut]:
    """Secret-looking env values and args are masked for viewers (operators see them)."""
    return [DeploymentOut.of(d, actor.may_change) for d in store.deployments()]


@router.post("", status_code=status.HTTP_201_CREATED)
def create_deployment(
    spec: DeploymentSpec,
    store: StoreDep,
    actor: Operator,
    response: Response,
    reason: Reason = None,
    dry_run: DryRun = False,
) -> DeploymentOut:
    if dry_run:
        response.status_code = status.HTTP_200_OK
    return DeploymentOut.of(store.create(spec, actor.label, reason, dry_run=dry_run))


@router.get("/{name}")
def get_deployment(name: str, store: StoreDep, actor: Viewer, response: Response) -> DeploymentOut:
    """Secret-looking env values and args are masked for viewers (operators see them).
    The ETag is the revision, for a PUT's If-Match."""
    current = store.get(name)
    response.headers["ETag"] = etag(current.revision)
    return DeploymentOut.of(current, actor.may_change)


@router.put("/{name}")
async def replace_deployment(
    name: str,
    body: DeploymentEdit,
    store: StoreDep,
    controller: ControllerDep,
    actor: Operator,
    response: Response,
    if_match: Annotated[str | None, Header(max_length=200)] = None,
    reason: Reason = None,
    dry_run: DryRun = False,
    rollout: Annotated[
        bool,
        Query(
            description="On a running deployment: roll the new revision out now (default), or "
            "store it pending (false) until `POST .../restart` rolls it out."
        ),
    ] = True,
    strategy: StrategyQuery = None,
) -> DeploymentOut:
    """Store the spec as the deployment's next revision (no new revision if nothing
    changed); with If-Match or `revision`, only if that is still the current revision. On
    a running deployment the revision is pending, then rolled out: the answer's `rollout`
    says what restarts, by which strategy (GET .../rollout follows it)."""
    based_on = body.revision if body.revision is not None else revision_of(if_match)
    if dry_run:
        spec = body.spec()
        saved = store.update(name, spec, actor.label, reason, based_on=based_on, dry_run=True)
        out = DeploymentOut.of(saved)
        if running(controller, name) and controller is not None:  # what a rollout would do
            target = Target(saved.revision, saved.spec, saved.ports)
            out.rollout = {"preview": True, **await controller.forecast_apply(name, target)}
        return out
    done = await store_and_roll_out(
        store,
        controller,
        name,
        body.spec(),
        actor.label,
        reason,
        based_on=based_on,
        rollout=rollout,
        strategy=strategy,
    )
    response.headers["ETag"] = etag(done.current.revision)
    out = DeploymentOut.of(done.current)
    out.rollout = done.rollout.to_json() if done.rollout is not None else None
    return out


def etag(revision: int) -> str:
    return f'"{revision}"'


def revision_of(if_match: str | None) -> int | None:
    """The revision an If-Match names (`"3"`, `W/"3"`, `3`); None for none or `*`."""
    if if_match is None or if_match.strip() == "*":
        return None
    tag = if_match.strip().removeprefix("W/").strip('"')
    if not tag.isdigit() or len(tag) > 18:  # past that, no revision this API stores
        raise BadRequest(f'If-Match {if_match!r} is not an ETag this API gave ("N", a revision)')
    return int(tag)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_deployment(
    name: str, store: StoreDep, controller: ControllerDep, actor: Operator, reason: Reason = None
) -> None:
    if controller is not None and controller.is_active(name):
        raise InvalidTransition(f"deployment {name!r} has running instances: stop it first")
    store.delete(name, actor.label, reason)


@router.post("/{name}/clone", status_code=status.HTTP_201_CREATED)
def clone_deployment(
    name: str, body: CloneRequest, store: StoreDep, actor: Operator, reason: Reason = None
) -> DeploymentOut:
    """A new deployment from this one's current revision; its explicit ports are dropped and
    fresh ones allocated, since two deployments cannot share ports."""
    return DeploymentOut.of(store.clone(name, body.name, actor.label, reason))
