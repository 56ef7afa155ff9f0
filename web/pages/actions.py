"""The operator's buttons on the deployment page: start/stop/restart, a mode switch and its
progress, the load run; each answers with the page's fragments it changed."""

from __future__ import annotations

import math

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from domain import finite
from services.bench_runs.runs import BenchStartFailed
from web import htmx
from web.deps import StoreDep, get_bench_runs, get_load_runs, get_service
from web.errors import ConfigError, Conflict, NotFound
from web.pages.main import deployment_context
from web.proxy_url import proxy_url
from web.routes.deployment import lifecycle
from web.views.form_fields import errors_at_fields, pydantic_detail
from web.views.page import PageActor, deployment_or_404, require_operator

router = APIRouter(tags=["pages"], include_in_schema=False)
ACTIONS = ("start", "stop", "restart")


@router.post("/deployments/{name}/actions/{action}", response_class=HTMLResponse)
async def lifecycle_action(
    name: str, action: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    current = deployment_or_404(store, name)
    form = await request.form()
    reason = str(form.get("reason", "")).strip()[:500] or None
    require_operator(actor)  # refusals are errors: web/errors.py answers the notice
    if action not in ACTIONS:
        raise NotFound(f"no action {action!r}; known: {', '.join(ACTIONS)}")
    await getattr(lifecycle, action)(name, get_service(request), store, actor, reason=reason)
    ctx = deployment_context(request, actor, current, flash=f"{action}: requested", flash_ok=True)
    return htmx.fragment(
        request,
        "deployment.html",
        ("flash", "topology_oob", "state_oob"),
        ctx,
        trigger="pd-refresh",
    )


@router.post("/deployments/{name}/switch", response_class=HTMLResponse)
async def switch_action(
    name: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    current = deployment_or_404(store, name)
    form = {k: str(v) for k, v in (await request.form()).items()}
    try:
        require_operator(actor)
        body = lifecycle.SwitchRequest.model_validate(
            {
                "mode": form.get("mode"),
                "strategy": form.get("strategy"),
                "reason": form.get("reason", "").strip(),
            }
        )
        record = await lifecycle.switch(name, body, get_service(request), store, actor)
    except ValidationError as exc:
        errors, _ = errors_at_fields(
            pydantic_detail(exc.errors(include_url=False)), {"mode", "strategy", "reason"}
        )
        return htmx.fragment(
            request,
            "deployment.html",
            "switch_form",
            deployment_context(request, actor, current, switch_errors=errors, switch_form=form),
            status.HTTP_422_UNPROCESSABLE_CONTENT,
        )
    ctx = deployment_context(request, actor, current, switch=record, switch_started=True)
    return htmx.fragment(
        request,
        "deployment.html",
        ("switch_form", "switch_progress_oob"),
        ctx,
        trigger="pd-refresh",
    )


@router.get("/deployments/{name}/switch-forecast", response_class=HTMLResponse)
async def switch_forecast(
    name: str, request: Request, store: StoreDep, actor: PageActor, mode: str = "read"
) -> HTMLResponse:
    """The dialog's forecast table for switching to `mode` (read unless it says write)."""
    current = deployment_or_404(store, name)
    target = "write" if mode == "write" else "read"
    ctx = deployment_context(request, actor, current, forecast_mode=target)
    return htmx.fragment(request, "deployment.html", "switch_forecast", ctx)


@router.get("/deployments/{name}/switches/{switch_id}", response_class=HTMLResponse)
async def switch_progress(
    name: str, switch_id: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    current = deployment_or_404(store, name)
    record = await lifecycle.switch_status(name, switch_id, get_service(request), store)
    ctx = deployment_context(request, actor, current, switch=record)
    trigger = None if record["state"] == "running" else "pd-refresh"
    return htmx.fragment(request, "deployment.html", "switch_progress", ctx, trigger=trigger)


# -- load -----------------------------------------------------------------------------------


@router.post("/deployments/{name}/load", response_class=HTMLResponse)
async def load_start(
    name: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    current = deployment_or_404(store, name)
    form = await request.form()
    runs = get_load_runs(request)
    require_operator(actor)
    if form.get("action") == "stop":
        await runs.stop(name)
    elif runs.busy(name):
        raise Conflict("a load run is already going: stop it first")
    elif get_bench_runs(request).busy(name):
        raise Conflict("a bench run is going against this deployment: stop it first")
    else:
        rate = _float(form.get("rate"), 8.0, "rate")
        duration = _float(form.get("duration"), 30.0, "duration")
        try:
            await runs.start(
                name,
                proxy_url(request.app.state, name, current.ports.proxy),
                rate,
                duration,
                current.spec.slo.ttft_ms,
                current.spec.slo.itl_ms,
            )
        except OSError as exc:
            raise BenchStartFailed(f"could not start pdctl bench: {exc}") from None
    ctx = deployment_context(request, actor, current)
    return htmx.fragment(request, "deployment.html", "load", ctx)


@router.get("/deployments/{name}/load", response_class=HTMLResponse)
def load_status(name: str, request: Request, store: StoreDep, actor: PageActor) -> HTMLResponse:
    ctx = deployment_context(request, actor, deployment_or_404(store, name))
    return htmx.fragment(request, "deployment.html", "load", ctx)


def _float(raw: object, default: float, field: str) -> float:
    try:
        value = float(str(raw))
    except ValueError:
        return default
    if not math.isfinite(value):  # "nan" and "inf" parse, and would break the run's sums
        raise ConfigError.at((field,), f"{finite.MESSAGE.lower()}, not {raw}", finite.TYPE)
    return value
