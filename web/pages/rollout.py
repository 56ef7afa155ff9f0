"""The deployment page's Rollout panel: the rollout running (else the last) with its steps,
each process's truth (the revision it runs, the one desired, drifted and why), and the
operator's two buttons, Abort rollout (while one runs) and Undo (to the applied revision
before, or one picked). The buttons call what the API calls (the controller's abort,
services/rollouts.py's undo); each answers with the panel re-rendered and a notice, a
refusal too (409: nothing to abort, a rollout holds it; 404: no such revision)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from domain.errors import PdctlError
from services import rollouts
from state.store import Current, Store
from web import htmx
from web.deps import StoreDep, get_controller, get_service
from web.routes.deployment.rollouts import UndoRequest
from web.security.auth import Actor
from web.views.page import PageActor, deployment_or_404, page_context, require_operator

router = APIRouter(tags=["pages"], include_in_schema=False)
TEMPLATE = "deployment.html"
ANSWER = ("rollout_notice", "rollout_oob", "rollout_undo_oob")  # what a button changes
CHOICES = 20  # revisions the Undo picker offers, newest first
FIELDS = ("to_revision", "strategy", "reason")  # the Undo form's, as the API's body


def panel(request: Request, store: Store, current: Current) -> dict[str, Any]:
    """What the panel's blocks read besides the deployment: GET .../rollout's answer and the
    Undo picker (the whole page passes them too: web/pages/main.py)."""
    return {
        "rollout_status": rollouts.status(store, get_controller(request), current.name),
        "undo_choices": undo_choices(store, current),
    }


def panel_context(
    request: Request, store: Store, actor: Actor, current: Current, **extra: Any
) -> dict[str, Any]:
    return page_context(request, actor, d=current, **panel(request, store, current), **extra)


def undo_choices(store: Store, current: Current) -> dict[str, Any]:
    """The Undo picker: the default (the applied revision before the desired one, as the
    API's undo takes it) and each earlier revision with its state and reason."""
    before = rollouts.last_applied(store, current.name, below=current.revision)
    earlier = [r for r in store.revisions(current.name) if r.number != current.revision]
    return {
        "default": before.revision if before is not None else None,
        "revisions": [
            {"number": r.number, "state": r.state, "reason": r.reason} for r in earlier[:CHOICES]
        ],
    }


@router.get("/deployments/{name}/rollout", response_class=HTMLResponse)
async def rollout_fragment(
    name: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    ctx = panel_context(request, store, actor, deployment_or_404(store, name))
    return htmx.fragment(request, TEMPLATE, "rollout", ctx)


@router.post("/deployments/{name}/rollout/abort", response_class=HTMLResponse)
async def abort_rollout(
    name: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    """Abort rollout: the reason is what the button's prompt was answered (HX-Prompt)."""
    deployment_or_404(store, name)
    reason = (request.headers.get("hx-prompt") or "").strip()[:500] or None
    try:
        require_operator(actor)
        rec = await get_service(request).abort(name, actor.label, reason)
    except PdctlError as exc:
        return _refused(request, store, actor, name, exc)
    back = (
        f"it rolls back to revision {rec.from_revision}"
        if rec.auto_rollback and rec.from_revision is not None
        else "it stops where it is"
    )
    return _answer(request, store, actor, name, f"Aborting {rec.describe()}: {back}.")


@router.post("/deployments/{name}/rollout/undo", response_class=HTMLResponse)
async def undo_rollout(
    name: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    """Undo: the picked revision (default: the applied one before), as a new revision."""
    deployment_or_404(store, name)
    form = {k: str(v).strip() for k, v in (await request.form()).items() if k in FIELDS}
    try:
        require_operator(actor)
        body = UndoRequest.model_validate({k: v for k, v in form.items() if v})
        done = await rollouts.undo(
            store,
            get_service(request),
            name,
            actor.label,
            body.reason,
            to_revision=body.to_revision,
            strategy=body.strategy,
        )
    except ValidationError as exc:
        said = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        return _answer(request, store, actor, name, said, status.HTTP_422_UNPROCESSABLE_CONTENT)
    except PdctlError as exc:
        return _refused(request, store, actor, name, exc)
    rec = done.rollout
    said = f"Undo stored revision {done.current.revision}"
    said += f": {rec.describe()} rolls it out." if rec is not None else ": nothing to roll out."
    return _answer(request, store, actor, name, said)


def _refused(
    request: Request, store: Store, actor: Actor, name: str, exc: PdctlError
) -> HTMLResponse:
    """A refusal is the panel's notice with its status; a 5xx is the page's (web/errors.py)."""
    if exc.status >= 500:
        raise exc
    return _answer(request, store, actor, name, exc.message, exc.status)


def _answer(
    request: Request,
    store: Store,
    actor: Actor,
    name: str,
    notice: str,
    status_code: int = status.HTTP_200_OK,
) -> HTMLResponse:
    ok = status_code < 400
    ctx = panel_context(
        request, store, actor, store.get(name), rollout_notice=notice, rollout_notice_ok=ok
    )
    return htmx.fragment(
        request, TEMPLATE, ANSWER, ctx, status_code, trigger="pd-refresh" if ok else None
    )
