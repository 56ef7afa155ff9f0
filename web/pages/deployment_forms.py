"""The create/edit deployment form: the same store calls as the API, with each problem shown at
its field; web/app.py includes this router before the pages' so /deployments/new is not a name.

The edit form is an operator's: a viewer gets 403. Even an operator's shows secrets as the
UNCHANGED marker (controller/spec/redact.py), and saving puts the stored values back where the
marker was left, so a form never stores the mask, nor shows a secret in the page source."""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import ValidationError

from controller import UNCHANGED, DeploymentSpec, holds_mask, redact_spec, restore_secrets
from domain import finite
from domain.finite import json_safe
from services.rollouts import store_and_roll_out
from web import htmx
from web.deps import ControllerDep, StoreDep
from web.errors import Conflict, Problem, SpecInvalid, StaleRevision, Unreadable
from web.security.auth import Actor
from web.views.form_fields import (
    CONNECTOR_CHOICES,
    EC_CHOICES,
    ENGINES,
    ITL_STATS,
    MODES,
    POLICIES,
    ROLES,
    TOPOLOGIES,
    FormValues,
    blank_group,
    errors_at_fields,
    new_values,
    pydantic_detail,
    spec_from_values,
    values_from_form,
    values_from_spec,
)
from web.views.page import (
    PageActor,
    page_context,
    require_operator,
)

router = APIRouter(tags=["pages"], include_in_schema=False)
FORM_CHOICES = {
    "engines": ENGINES,
    "topologies": TOPOLOGIES,
    "roles": ROLES,
    "modes": MODES,
    "policies": POLICIES,
    "itl_stats": ITL_STATS,
    "connectors": CONNECTOR_CHOICES,
    "ec_connectors": EC_CHOICES,
}


def _form(
    request: Request,
    actor: Actor,
    values: FormValues,
    editing: str | None,
    errors: dict[str, list[str]] | None = None,
    general: list[str] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    ctx = page_context(
        request,
        actor,
        v=values,
        editing=editing,
        errors=errors or {},
        general=general or [],
        **FORM_CHOICES,
    )
    if htmx.is_htmx(request):
        return htmx.fragment(request, "deployment_form.html", "form", ctx, status_code)
    return htmx.page(request, "deployment_form.html", ctx, status_code)


@router.get("/deployments/new", response_class=HTMLResponse)
def new_form(request: Request, actor: PageActor) -> HTMLResponse:
    return _form(request, actor, new_values(), None)


@router.post("/deployments/new", response_class=HTMLResponse, response_model=None)
async def create_from_form(
    request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse | RedirectResponse:
    return await _submit(request, store, actor, None)


@router.get("/deployments/{name}/edit", response_class=HTMLResponse)
def edit_form(name: str, request: Request, store: StoreDep, actor: PageActor) -> HTMLResponse:
    require_operator(actor)  # Forbidden, NotFound: web/errors.py answers the page
    stored = store.stored(name)  # as stored: an unreadable one is fixed here
    try:
        store.get(name)
    except Unreadable as exc:
        problem = [exc.message]
    else:
        problem = []
    shown = redact_spec(json_safe(stored.spec), UNCHANGED)
    values = values_from_spec(shown)
    values.revision = stored.number
    return _form(request, actor, values, name, general=problem)


@router.post("/deployments/{name}/edit", response_class=HTMLResponse, response_model=None)
async def update_from_form(
    name: str, request: Request, store: StoreDep, controller: ControllerDep, actor: PageActor
) -> HTMLResponse | RedirectResponse:
    require_operator(actor)
    store.stored(name)  # there, even if unreadable: saving the form is the fix
    return await _submit(request, store, actor, name, controller)


async def _submit(
    request: Request,
    store: StoreDep,
    actor: Actor,
    editing: str | None,
    controller: ControllerDep = None,
) -> HTMLResponse | RedirectResponse:
    form = {k: str(v) for k, v in (await request.form()).items()}
    values = values_from_form(form)
    if editing:
        values.fields["name"] = editing  # a rename is a clone, not an edit
    action = form.get("action", "save")
    if action == "add-group":
        values.groups.append(
            blank_group(len(values.groups), "decode" if len(values.groups) % 2 else "prefill")
        )
        return _form(request, actor, values, editing)
    if action.startswith("remove-group-"):
        index = int(action.rpartition("-")[2]) if action.rpartition("-")[2].isdigit() else -1
        if 0 <= index < len(values.groups):
            del values.groups[index]
        return _form(request, actor, values, editing)
    require_operator(actor)  # a viewer's refusal is an error (403), not a field's problem
    base = store.stored(editing).spec if editing else None
    try:
        spec = DeploymentSpec.model_validate(_unmasked(spec_from_values(values, base), base))
        reason = form.get("reason", "").strip() or None
        if editing:  # as the API's PUT: a running deployment's revision is rolled out
            done = await store_and_roll_out(
                store, controller, editing, spec, actor.label, reason, based_on=values.revision
            )
            saved = done.current
        else:
            saved = store.create(spec, actor.label, reason)
    except ValidationError as exc:
        detail: object = pydantic_detail(exc.errors(include_url=False))
    except SpecInvalid as exc:
        detail = exc.detail()
    except Conflict as exc:  # a taken name, at its field; an edit from an old revision
        stale = isinstance(exc, StaleRevision)
        loc = ["body", "name"] if exc.status == status.HTTP_409_CONFLICT and not stale else []
        detail = [{"loc": loc, "msg": exc.message, "type": exc.title}]
        if stale:  # not the form's fault: a 409, as the API's
            errors, general = errors_at_fields(detail, values.input_names())
            return _form(request, actor, values, editing, errors, general, exc.status)
    else:
        url = f"/deployments/{saved.name}"
        if htmx.is_htmx(request):
            return HTMLResponse("", headers=htmx.redirect(url))
        return RedirectResponse(url, status_code=status.HTTP_303_SEE_OTHER)
    errors, general = errors_at_fields(detail, values.input_names())
    return _form(
        request, actor, values, editing, errors, general, status.HTTP_422_UNPROCESSABLE_CONTENT
    )


def _unmasked(submitted: dict, stored: dict | None) -> dict:
    """The stored secrets back where the form still shows the marker; a marker left where
    nothing was stored (a line copied elsewhere) is refused rather than stored, and so is a
    number the form read as NaN or Infinity ("inf" parses as a float)."""
    spec = restore_secrets(submitted, stored) if stored is not None else submitted
    if places := finite.non_finite(spec):
        raise SpecInvalid([Problem(p, finite.MESSAGE, finite.TYPE) for p in places])
    if holds_mask(spec):
        raise SpecInvalid(
            [
                Problem(
                    (),
                    f"{UNCHANGED} stands for a stored secret, but this one matches none "
                    "(was it moved or edited?): type the value again",
                )
            ]
        )
    return spec
