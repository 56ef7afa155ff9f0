"""The HTML pages: the deployments list, the create/edit form, and the deployment page with its
fragments (topology, events, commands, log tails, load, switch progress).

Pages call the same store and lifecycle code as the REST API, so a page shows exactly what the
API would answer; errors come back as a message in the page, never a blank one.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import ValidationError

from controller.deployment import DeploymentSpec
from controller.supervisor import SupervisorError
from controller.switch_plan import SwitchRejected
from web import htmx
from web.auth import Actor
from web.demo import DEMO_NAME
from web.deployment_form import (
    CONNECTOR_CHOICES,
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
from web.deps import StoreDep, current_actor
from web.errors import Forbidden, NotFound, PdctlError, SpecInvalid, Unauthorized
from web.load import MAX_DURATION_S, MAX_RATE, LoadRuns
from web.routes import events as events_api
from web.routes import lifecycle
from web.store import Current

router = APIRouter(tags=["pages"], include_in_schema=False)
STATIC_FILES = {"htmx": f"htmx-{htmx.HTMX_VERSION}.min.js",
                "htmx_ws": f"htmx-ext-ws-{htmx.HTMX_WS_VERSION}.min.js",
                "uplot": f"uPlot-{htmx.UPLOT_VERSION}.iife.min.js",
                "uplot_css": f"uPlot-{htmx.UPLOT_VERSION}.min.css"}
_STOPPED = ("STOPPED", "EXITED")
ACTIONS = ("start", "stop", "restart")
STRATEGIES = ("hold", "keep-serving", "roll")


def page_actor(request: Request) -> Actor:
    """The signed-in actor; a browser without a valid cookie goes to the login page."""
    try:
        return current_actor(request)
    except Unauthorized:
        if htmx.is_htmx(request):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED,
                                headers=htmx.redirect("/login")) from None
        raise HTTPException(status.HTTP_303_SEE_OTHER, headers={"Location": "/login"}) from None


PageActor = Annotated[Actor, Depends(page_actor)]


def page_context(request: Request, actor: Actor, **extra: Any) -> dict[str, Any]:
    return {"static": STATIC_FILES, "actor": actor,
            "auth": request.app.state.tokens.enabled, **extra}


def _operator(actor: Actor) -> None:
    if not actor.may_change:
        raise Forbidden(f"{actor.label} may only read; changes need an operator token")


# -- the deployments list -----------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def deployments_page(request: Request, store: StoreDep, actor: PageActor) -> HTMLResponse:
    ctx = page_context(request, actor, rows=[_summary(request, d) for d in store.deployments()])
    if htmx.is_htmx(request):
        return htmx.fragment(request, "deployments.html", "rows", ctx)
    return htmx.page(request, "deployments.html", ctx)


def _summary(request: Request, d: Current) -> dict[str, Any]:
    units = _units(request, d.name)
    return {"name": d.name, "revision": d.revision, "spec": d.spec, "ports": d.ports,
            "state": overall_state(units, _switching(request, d.name)),
            "modes": _modes(d.spec), "updated_at": d.updated_at,
            "running": sum(u["state"] == "RUNNING" for u in units), "units": len(units)}


def overall_state(units: list[dict[str, Any]], switching: bool = False) -> str:
    """One word for a deployment's instances, worst first."""
    states = {u["state"] for u in units}
    if switching:
        return "switching"
    if not units or states <= set(_STOPPED):
        return "stopped"
    for word in ("FATAL", "BACKOFF", "STOPPING", "STARTING"):
        if word in states:
            return word.lower()
    return "running" if states == {"RUNNING"} else "degraded"


def _units(request: Request, name: str) -> list[dict[str, Any]]:
    controller = request.app.state.controller
    return controller.status(name) if controller is not None else []


def _switching(request: Request, name: str) -> bool:
    controller = request.app.state.controller
    if controller is None:
        return False
    history = controller.switches.history(name)
    return bool(history) and history[-1].state == "running"


def _modes(spec: DeploymentSpec) -> list[str]:
    return sorted({g.mode.value for g in spec.groups if g.mode is not None})


# -- the create/edit form -------------------------------------------------------------------


FORM_CHOICES = {"engines": ENGINES, "topologies": TOPOLOGIES, "roles": ROLES, "modes": MODES,
                "policies": POLICIES, "itl_stats": ITL_STATS, "connectors": CONNECTOR_CHOICES}


def _form(request: Request, actor: Actor, values: FormValues, editing: str | None,
          errors: dict[str, list[str]] | None = None, general: list[str] | None = None,
          status_code: int = 200) -> HTMLResponse:
    ctx = page_context(request, actor, v=values, editing=editing, errors=errors or {},
                   general=general or [], **FORM_CHOICES)
    if htmx.is_htmx(request):
        return htmx.fragment(request, "deployment_form.html", "form", ctx, status_code)
    return htmx.page(request, "deployment_form.html", ctx, status_code)


@router.get("/deployments/new", response_class=HTMLResponse)
def new_form(request: Request, actor: PageActor) -> HTMLResponse:
    return _form(request, actor, new_values(), None)


@router.post("/deployments/new", response_class=HTMLResponse, response_model=None)
async def create_from_form(request: Request, store: StoreDep,
                           actor: PageActor) -> HTMLResponse | RedirectResponse:
    return await _submit(request, store, actor, None)


@router.get("/deployments/{name}/edit", response_class=HTMLResponse)
def edit_form(name: str, request: Request, store: StoreDep, actor: PageActor) -> HTMLResponse:
    try:
        current = store.get(name)
    except NotFound as exc:
        return _error_page(request, actor, exc)
    return _form(request, actor, values_from_spec(current.spec.model_dump(mode="json")), name)


@router.post("/deployments/{name}/edit", response_class=HTMLResponse, response_model=None)
async def update_from_form(name: str, request: Request, store: StoreDep,
                           actor: PageActor) -> HTMLResponse | RedirectResponse:
    _get(store, name)
    return await _submit(request, store, actor, name)


async def _submit(request: Request, store: StoreDep, actor: Actor,
                  editing: str | None) -> HTMLResponse | RedirectResponse:
    form = {k: str(v) for k, v in (await request.form()).items()}
    values = values_from_form(form)
    if editing:
        values.fields["name"] = editing  # a rename is a clone, not an edit
    action = form.get("action", "save")
    if action == "add-group":
        values.groups.append(blank_group(len(values.groups),
                                         "decode" if len(values.groups) % 2 else "prefill"))
        return _form(request, actor, values, editing)
    if action.startswith("remove-group-"):
        index = int(action.rpartition("-")[2]) if action.rpartition("-")[2].isdigit() else -1
        if 0 <= index < len(values.groups):
            del values.groups[index]
        return _form(request, actor, values, editing)
    base = store.get(editing).spec.model_dump(mode="json") if editing else None
    try:
        _operator(actor)
        spec = DeploymentSpec.model_validate(spec_from_values(values, base))
        reason = form.get("reason", "").strip() or None
        saved = (store.update(editing, spec, actor.label, reason) if editing
                 else store.create(spec, actor.label, reason))
    except ValidationError as exc:
        detail: object = pydantic_detail(exc.errors(include_url=False))
    except SpecInvalid as exc:
        detail = exc.detail()
    except PdctlError as exc:  # a taken name (409), a viewer (403): said at the top
        loc = ["body", "name"] if exc.status == status.HTTP_409_CONFLICT else []
        detail = [{"loc": loc, "msg": exc.message, "type": exc.title}]
    else:
        url = f"/deployments/{saved.name}"
        if htmx.is_htmx(request):
            return HTMLResponse("", headers=htmx.redirect(url))
        return RedirectResponse(url, status_code=status.HTTP_303_SEE_OTHER)
    errors, general = errors_at_fields(detail, values.input_names())
    return _form(request, actor, values, editing, errors, general,
                 status.HTTP_422_UNPROCESSABLE_CONTENT)


# -- the deployment page ----------------------------------------------------------------------


def _get(store: StoreDep, name: str) -> Current:
    try:
        return store.get(name)
    except NotFound as exc:
        raise _PageError(exc) from None


class _PageError(HTTPException):
    def __init__(self, error: PdctlError) -> None:
        super().__init__(error.status, error.message)


def _deployment_context(request: Request, actor: Actor, current: Current,
                        **extra: Any) -> dict[str, Any]:
    name = current.name
    units = _units(request, name)
    controller = request.app.state.controller
    switches = controller.switches.history(name) if controller is not None else []
    ctx = page_context(
        request, actor, d=current, spec=current.spec, ports=current.ports, units=units,
        topology=topology(current, units), modes=_modes(current.spec),
        state=overall_state(units, bool(switches) and switches[-1].state == "running"),
        switch=switches[-1].to_json() if switches else None, load=_loads(request).current(name),
        max_rate=MAX_RATE, max_duration=MAX_DURATION_S, strategies=STRATEGIES,
        simulated=current.spec.engine.value == "sim", demo=name == DEMO_NAME,
        has_controller=controller is not None)
    ctx.update(extra)
    return ctx


def topology(current: Current, units: list[dict[str, Any]]) -> dict[str, Any]:
    """The proxy and each instance group with its instances: the stored spec and ports, with
    live state where the supervisor has it."""
    by_name = {u["name"]: u for u in units}
    proxy = by_name.get("proxy", {})
    groups = []
    for group in current.spec.groups:
        instances = []
        for i in range(group.count):
            iname = f"{group.name}-{i}"
            unit = by_name.get(iname, {})
            ports = current.ports.instances.get(iname)
            instances.append({
                "name": iname, "gpus": group.instance_gpus(i),
                "ports": ports.model_dump(exclude_none=True) if ports else {},
                "state": unit.get("state", "STOPPED"), "pid": unit.get("pid"),
                "uptime": unit.get("uptime"), "restarts": unit.get("restarts", 0),
                "health": unit.get("health"), "registration": unit.get("registration"),
                "url": unit.get("url"), "log_error": unit.get("log_error")})
        groups.append({"name": group.name, "role": group.role.value, "tp": group.tp,
                       "mode": group.mode.value if group.mode else None,
                       "instances": instances})
    return {"proxy": {"port": current.ports.proxy, "registry": current.ports.registry,
                      "policy": current.spec.proxy.policy,
                      "state": proxy.get("state", "STOPPED"), "pid": proxy.get("pid"),
                      "restarts": proxy.get("restarts", 0), "health": proxy.get("health"),
                      "url": proxy.get("url") or f"http://127.0.0.1:{current.ports.proxy}"},
            "groups": groups}


def _error_page(request: Request, actor: Actor, error: PdctlError) -> HTMLResponse:
    return htmx.page(request, "error.html", page_context(request, actor, title=error.title,
                                                     message=error.message), error.status)


@router.get("/deployments/{name}", response_class=HTMLResponse)
def deployment_page(name: str, request: Request, store: StoreDep,
                    actor: PageActor) -> HTMLResponse:
    try:
        current = store.get(name)
    except NotFound as exc:
        return _error_page(request, actor, exc)
    ctx = _deployment_context(request, actor, current,
                              events=store.events(name, None, 50))
    return htmx.page(request, "deployment.html", ctx)


@router.get("/deployments/{name}/topology", response_class=HTMLResponse)
def topology_fragment(name: str, request: Request, store: StoreDep,
                      actor: PageActor) -> HTMLResponse:
    ctx = _deployment_context(request, actor, _get(store, name))
    return htmx.fragment(request, "deployment.html", ("topology", "state_oob"), ctx)


@router.get("/deployments/{name}/events", response_class=HTMLResponse)
def events_fragment(name: str, request: Request, store: StoreDep, actor: PageActor,
                    limit: Annotated[int, Query(ge=1, le=500)] = 50) -> HTMLResponse:
    _get(store, name)
    events = events_api.list_events(store, name, None, limit)
    return htmx.fragment(request, "deployment.html", "events",
                         page_context(request, actor, events=events))


@router.get("/deployments/{name}/commands", response_class=HTMLResponse)
def commands_fragment(name: str, request: Request, store: StoreDep,
                      actor: PageActor) -> HTMLResponse:
    current = _get(store, name)
    try:
        commands, error = lifecycle.commands(name, request, store), None
    except PdctlError as exc:
        commands, error = {}, exc.message
    return htmx.fragment(request, "deployment.html", "commands",
                         page_context(request, actor, commands=commands, error=error,
                                  simulated=current.spec.engine.value == "sim"))


@router.get("/deployments/{name}/logs/{instance}", response_class=HTMLResponse)
def log_fragment(name: str, instance: str, request: Request, store: StoreDep,
                 actor: PageActor,
                 lines: Annotated[int, Query(ge=1, le=2000)] = 120) -> HTMLResponse:
    _get(store, name)
    try:
        tail, error = lifecycle.log_tail(name, instance, request, store, lines)["lines"], None
    except PdctlError as exc:
        tail, error = [], exc.message
    return htmx.fragment(request, "deployment.html", "log",
                         page_context(request, actor, name=name, instance=instance, tail=tail,
                                  error=error))


@router.post("/deployments/{name}/actions/{action}", response_class=HTMLResponse)
async def lifecycle_action(name: str, action: str, request: Request, store: StoreDep,
                           actor: PageActor) -> HTMLResponse:
    current = _get(store, name)
    form = await request.form()
    reason = str(form.get("reason", "")).strip()[:500] or None
    message, ok = f"{action}: requested", True
    try:
        _operator(actor)
        if action not in ACTIONS:
            raise NotFound(f"no action {action!r}; known: {', '.join(ACTIONS)}")
        await getattr(lifecycle, action)(name, request, store, actor, reason=reason)
    except (PdctlError, SupervisorError, SwitchRejected) as exc:
        message, ok = _message(exc), False
    ctx = _deployment_context(request, actor, current, flash=message, flash_ok=ok)
    return htmx.fragment(request, "deployment.html", ("flash", "topology_oob", "state_oob"),
                         ctx, trigger="pd-refresh")


@router.post("/deployments/{name}/switch", response_class=HTMLResponse)
async def switch_action(name: str, request: Request, store: StoreDep,
                        actor: PageActor) -> HTMLResponse:
    current = _get(store, name)
    form = {k: str(v) for k, v in (await request.form()).items()}
    try:
        _operator(actor)
        body = lifecycle.SwitchRequest.model_validate(
            {"mode": form.get("mode"), "strategy": form.get("strategy"),
             "reason": form.get("reason", "").strip()})
        record = await lifecycle.switch(name, body, request, store, actor)
    except ValidationError as exc:
        errors, _ = errors_at_fields(pydantic_detail(exc.errors(include_url=False)),
                                     {"mode", "strategy", "reason"})
        return htmx.fragment(request, "deployment.html", "switch_form",
                             _deployment_context(request, actor, current, switch_errors=errors,
                                                 switch_form=form),
                             status.HTTP_422_UNPROCESSABLE_CONTENT)
    except (PdctlError, SupervisorError) as exc:
        return htmx.fragment(request, "deployment.html", "switch_form",
                             _deployment_context(request, actor, current,
                                                 switch_errors={"": [_message(exc)]},
                                                 switch_form=form),
                             status.HTTP_409_CONFLICT)
    ctx = _deployment_context(request, actor, current, switch=record, switch_started=True)
    return htmx.fragment(request, "deployment.html", ("switch_form", "switch_progress_oob"),
                         ctx, trigger="pd-refresh")


@router.get("/deployments/{name}/switches/{switch_id}", response_class=HTMLResponse)
def switch_progress(name: str, switch_id: str, request: Request, store: StoreDep,
                    actor: PageActor) -> HTMLResponse:
    current = _get(store, name)
    try:
        record = lifecycle.switch_status(name, switch_id, request, store)
    except PdctlError as exc:
        return htmx.fragment(request, "deployment.html", "flash",
                             page_context(request, actor, flash=exc.message, flash_ok=False))
    ctx = _deployment_context(request, actor, current, switch=record)
    trigger = None if record["state"] == "running" else "pd-refresh"
    return htmx.fragment(request, "deployment.html", "switch_progress", ctx, trigger=trigger)


# -- load -----------------------------------------------------------------------------------


def _loads(request: Request) -> LoadRuns:
    runs = getattr(request.app.state, "load_runs", None)
    if runs is None:
        runs = request.app.state.load_runs = LoadRuns()
    return runs


@router.post("/deployments/{name}/load", response_class=HTMLResponse)
async def load_start(name: str, request: Request, store: StoreDep,
                     actor: PageActor) -> HTMLResponse:
    current = _get(store, name)
    form = await request.form()
    runs = _loads(request)
    error = None
    try:
        _operator(actor)
        if form.get("action") == "stop":
            await runs.stop(name)
        elif runs.busy(name):
            error = "a load run is already going: stop it first"
        elif (bench := getattr(request.app.state, "bench_runs", None)) and bench.busy(name):
            error = "a bench run is going against this deployment: stop it first"
        else:
            rate = _float(form.get("rate"), 8.0)
            duration = _float(form.get("duration"), 30.0)
            await runs.start(name, f"http://127.0.0.1:{current.ports.proxy}", rate, duration,
                             current.spec.slo.ttft_ms, current.spec.slo.itl_ms)
    except PdctlError as exc:
        error = exc.message
    except OSError as exc:
        error = f"could not start pdctl bench: {exc}"
    ctx = _deployment_context(request, actor, current, load_error=error)
    return htmx.fragment(request, "deployment.html", "load", ctx)


@router.get("/deployments/{name}/load", response_class=HTMLResponse)
def load_status(name: str, request: Request, store: StoreDep,
                actor: PageActor) -> HTMLResponse:
    ctx = _deployment_context(request, actor, _get(store, name))
    return htmx.fragment(request, "deployment.html", "load", ctx)


def _float(raw: object, default: float) -> float:
    try:
        return float(str(raw))
    except ValueError:
        return default


def _message(exc: Exception) -> str:
    return exc.message if isinstance(exc, PdctlError) else str(exc)
