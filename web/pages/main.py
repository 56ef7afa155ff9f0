"""The deployments list and the deployment page with its fragments (topology, events, commands,
log tails); the page's context is built here for page_actions' fragments too."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from controller import DeploymentSpec
from services.demo.deployments import DEMO_NAME
from services.load import MAX_DURATION_S, MAX_RATE
from state.store import Current
from web import htmx
from web.deps import StoreDep, get_controller, get_load_runs, get_observer, get_service
from web.pages.rollout import panel as rollout_panel
from web.routes.deployment import lifecycle
from web.routes.watch import events as events_api
from web.routes.watch import trade
from web.schemas import EventOut
from web.security.auth import Actor
from web.views.latency_source import latency_view
from web.views.page import (
    PageActor,
    deployment_or_404,
    page_context,
)
from web.views.pd_banner import pd_banner
from web.views.topology import topology

router = APIRouter(tags=["pages"], include_in_schema=False)
_STOPPED = ("STOPPED", "EXITED")
STRATEGIES = ("hold", "keep-serving", "roll")


# -- the deployments list -----------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
async def deployments_page(request: Request, store: StoreDep, actor: PageActor) -> HTMLResponse:
    rows = [_summary(request, d) for d in store.deployments()]
    ctx = page_context(request, actor, rows=rows, unreadable=store.unreadable())
    if htmx.is_htmx(request):
        return htmx.fragment(request, "deployments.html", "rows", ctx)
    states = {r["name"]: r["state"] for r in rows}
    ctx["trade"] = trade.panel(request, store, lambda name: states.get(name, "stopped"))
    return htmx.page(request, "deployments.html", ctx)


@router.get("/demo/trade", response_class=HTMLResponse)
async def trade_fragment(request: Request, store: StoreDep, actor: PageActor) -> HTMLResponse:
    """The trade panel of the list, polled on its own (it reads frames and the advisor)."""

    def state(name: str) -> str:
        return overall_state(_units(request, name))

    ctx = page_context(request, actor, trade=trade.panel(request, store, state))
    return htmx.fragment(request, "deployments.html", "trade", ctx)


def _summary(request: Request, d: Current) -> dict[str, Any]:
    units = _units(request, d.name)
    return {
        "name": d.name,
        "revision": d.revision,
        "spec": d.spec,
        "ports": d.ports,
        "state": overall_state(units, _switching(request, d.name)),
        "modes": _modes(d.spec),
        "updated_at": d.updated_at,
        "running": sum(u["state"] == "RUNNING" for u in units),
        "units": len(units),
    }


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
    controller = get_controller(request)
    return controller.status(name) if controller is not None else []


def _switching(request: Request, name: str) -> bool:
    controller = get_controller(request)
    if controller is None:
        return False
    return controller.rollouts.active(name) is not None


def primary_action(state: str) -> str | None:
    """The lifecycle button a page makes primary for an `overall_state`: Start a stopped
    deployment, Stop a running one, Restart one with a process down; none while it changes."""
    if state == "stopped":
        return "start"
    if state == "running":
        return "stop"
    if state in ("degraded", "fatal", "backoff"):
        return "restart"
    return None  # starting, stopping, switching: wait for it


def _modes(spec: DeploymentSpec) -> list[str]:
    return sorted({g.mode.value for g in spec.groups if g.mode is not None})


# -- the deployment page ----------------------------------------------------------------------


def _pd_section(request: Request, name: str) -> dict[str, Any] | None:
    return _frame_section(request, name, "pd")


def _frame_section(request: Request, name: str, key: str) -> Any:  # the section's own shape
    observer = get_observer(request)
    frame = observer.frame(name) if observer is not None else None
    return frame.get(key) if frame else None


def deployment_context(
    request: Request, actor: Actor, current: Current, **extra: Any
) -> dict[str, Any]:
    name = current.name
    units = _units(request, name)
    controller = get_controller(request)
    switches = controller.switches(name) if controller is not None else []
    last = controller.rollouts.last(name) if controller is not None else None
    state = overall_state(units, last is not None and last.active)
    ctx = page_context(
        request,
        actor,
        d=current,
        spec=current.spec,
        ports=current.ports,
        units=units,
        topology=topology(current, units),
        modes=_modes(current.spec),
        state=state,
        primary=primary_action(state),
        rollout=last.to_json() if last is not None else None,
        switch=switches[-1].to_json() if switches else None,
        load=get_load_runs(request).current(name),
        max_rate=MAX_RATE,
        max_duration=MAX_DURATION_S,
        strategies=STRATEGIES,
        simulated=current.spec.engine.value == "sim",
        demo=name == DEMO_NAME,
        has_controller=controller is not None,
        pd=pd_banner(_pd_section(request, name), current.spec.topology.value == "colocated"),
        canary=_frame_section(request, name, "canary"),
        latency=latency_view(
            _frame_section(request, name, "latency_source"),
            _frame_section(request, name, "ttft_breakdown"),
        ),
    )
    kv = current.spec.kv_backend
    if controller is not None and kv is not None and kv.has_modes:
        target = extra.pop("forecast_mode", None) or _other_mode(ctx["modes"])
        ctx["forecast"] = controller.switch_preview(name, current.spec, target)
    ctx.update(extra)
    return ctx


def _other_mode(modes: list[str]) -> str:
    """The mode the switch dialog offers first: the other one when all run in one."""
    return "write" if modes == ["read"] else "read"


@router.get("/deployments/{name}", response_class=HTMLResponse)
async def deployment_page(
    name: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    current = store.get(name)  # NotFound, or Unreadable: web/errors.py answers the page
    events = [EventOut.of(e) for e in store.events(name, None, 50)]
    ctx = deployment_context(request, actor, current, events=events)
    ctx.update(rollout_panel(request, store, current))
    return htmx.page(request, "deployment.html", ctx)


@router.get("/deployments/{name}/topology", response_class=HTMLResponse)
async def topology_fragment(
    name: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    ctx = deployment_context(request, actor, deployment_or_404(store, name))
    return htmx.fragment(request, "deployment.html", ("topology", "state_oob"), ctx)


@router.get("/deployments/{name}/events", response_class=HTMLResponse)
def events_fragment(
    name: str,
    request: Request,
    store: StoreDep,
    actor: PageActor,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> HTMLResponse:
    deployment_or_404(store, name)
    events = events_api.list_events(store, name, None, limit)
    return htmx.fragment(
        request, "deployment.html", "events", page_context(request, actor, events=events)
    )


@router.get("/deployments/{name}/commands", response_class=HTMLResponse)
def commands_fragment(
    name: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    current = deployment_or_404(store, name)
    commands = lifecycle.commands(name, get_service(request), store)
    return htmx.fragment(
        request,
        "deployment.html",
        "commands",
        page_context(
            request,
            actor,
            commands=commands,
            simulated=current.spec.engine.value == "sim",
        ),
    )


@router.get("/deployments/{name}/logs/{instance}", response_class=HTMLResponse)
def log_fragment(
    name: str,
    instance: str,
    request: Request,
    store: StoreDep,
    actor: PageActor,
    lines: Annotated[int, Query(ge=1, le=2000)] = 120,
) -> HTMLResponse:
    deployment_or_404(store, name)
    tail = lifecycle.log_tail(name, instance, get_service(request), store, lines)["lines"]
    return htmx.fragment(
        request,
        "deployment.html",
        "log",
        page_context(request, actor, name=name, instance=instance, tail=tail),
    )
