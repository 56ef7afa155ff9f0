"""The bench pages: the deployment page's Bench panel (start a run or sweep, its progress, past
runs to tick for comparison) and /bench/compare, which overlays runs as curves.

They call the same code as /api/.../bench (web/routes/advise/bench.py), so a page shows what the API
would answer; a refusal is an error (web/errors.py answers the page's notice).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from services.bench_runs import compare as bench_compare
from services.bench_runs.request import MAX_ARRIVALS_S, MAX_PROMPTS, MAX_RATE, BenchRequest
from state.store import Current
from web import htmx
from web.deps import StoreDep, get_bench_runs
from web.errors import Forbidden, NotFound
from web.routes.advise.bench import compare_runs, parse_ids, start_run
from web.security.auth import Actor
from web.views.page import PageActor, page_context

router = APIRouter(tags=["pages"], include_in_schema=False)
PANEL = "bench_panel.html"
FORM_FIELDS = (
    "rates",
    "num_prompts",
    "input_len",
    "output_len",
    "slo_ttft_ms",
    "slo_itl_ms",
    "burstiness",
    "seed",
)
DEFAULTS = {
    "rates": "1,2,4,8",
    "num_prompts": "20",
    "input_len": "128",
    "output_len": "32",
    "burstiness": "1",
    "seed": "0",
}


def _panel_context(
    request: Request, actor: Actor, current: Current, **extra: Any
) -> dict[str, Any]:
    runs = get_bench_runs(request)
    past = runs.store.of(current.name, 20)
    active_id = runs.current(current.name)
    active = next((r for r in past if r.id == active_id), None)
    return page_context(
        request,
        actor,
        d=current,
        spec=current.spec,
        runs=past,
        active=active,
        label=bench_compare.label,
        mgr=bench_compare.max_goodput_rate,
        partial=bench_compare.partial,
        measured=bench_compare.rates_measured,
        fmt_rates=lambda rates: ", ".join(_rate(r) for r in rates),
        form=extra.pop("form", DEFAULTS),
        errors=extra.pop("errors", {}),
        max_rate=MAX_RATE,
        max_prompts=MAX_PROMPTS,
        max_arrivals=MAX_ARRIVALS_S,
        **extra,
    )


def _rate(rate: float | str) -> str:
    return f"{rate:g}" if isinstance(rate, int | float) else str(rate)  # "inf": all at once


def _current(store: StoreDep, name: str) -> Current:
    return store.get(name)  # NotFound: web/errors.py answers the notice (htmx) or a page


@router.get("/deployments/{name}/bench", response_class=HTMLResponse)
def panel(name: str, request: Request, store: StoreDep, actor: PageActor) -> HTMLResponse:
    ctx = _panel_context(request, actor, _current(store, name))
    if htmx.is_htmx(request):
        return htmx.fragment(request, PANEL, "panel", ctx)
    return htmx.page(request, PANEL, ctx)


@router.get("/deployments/{name}/bench/current", response_class=HTMLResponse)
def current_run(name: str, request: Request, store: StoreDep, actor: PageActor) -> HTMLResponse:
    """What the panel polls while a run goes; once it has ended, the list of runs too."""
    ctx = _panel_context(request, actor, _current(store, name))
    blocks = ("current",) if ctx["active"] else ("current", "runs_oob")
    return htmx.fragment(request, PANEL, blocks, ctx)


@router.get("/deployments/{name}/bench/runs", response_class=HTMLResponse)
def runs_list(name: str, request: Request, store: StoreDep, actor: PageActor) -> HTMLResponse:
    """The list of runs alone, redrawn on a bench event (a run kept from a terminal too)
    without touching the form above it."""
    ctx = _panel_context(request, actor, _current(store, name))
    return htmx.fragment(request, PANEL, "runs", ctx)


@router.post("/deployments/{name}/bench", response_class=HTMLResponse)
async def start_from_form(
    name: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    current = _current(store, name)
    form = {k: str((await request.form()).get(k, "")).strip() for k in FORM_FIELDS}
    errors: dict[str, list[str]] = {}
    if not actor.may_change:  # refusals are errors: web/errors.py answers the notice
        raise Forbidden(f"{actor.label} may only read; a bench run needs an operator")
    try:
        body = BenchRequest.model_validate({k: v for k, v in form.items() if v != ""})
    except ValidationError as exc:  # the form's own 422: each problem at its field
        for error in exc.errors(include_url=False):
            field = str(error["loc"][0]) if error["loc"] else ""
            errors.setdefault(field, []).append(error["msg"])
    else:
        await start_run(request, current, body, actor.label)
    ctx = _panel_context(request, actor, current, form=form, errors=errors)
    code = status.HTTP_422_UNPROCESSABLE_CONTENT if errors else status.HTTP_200_OK
    return htmx.fragment(request, PANEL, ("current", "runs_oob"), ctx, code)


@router.post("/deployments/{name}/bench/stop", response_class=HTMLResponse)
async def stop_from_form(
    name: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    current = _current(store, name)
    runs = get_bench_runs(request)
    if not actor.may_change:
        raise Forbidden(f"{actor.label} may only read; stopping a run needs an operator")
    run_id = runs.current(name)
    if run_id is None:
        raise NotFound(f"no bench run of {name!r} is going")
    await runs.stop(run_id, actor.label)
    ctx = _panel_context(request, actor, current)
    return htmx.fragment(request, PANEL, ("current", "runs_oob"), ctx)


@router.get("/bench/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    actor: PageActor,
    ids: Annotated[str | None, Query(max_length=200)] = None,
    picked: Annotated[list[int] | None, Query(alias="id", max_length=50)] = None,
) -> HTMLResponse:
    """`?ids=1,2,3` (links) or `?id=1&id=2` (the panel's checkboxes)."""
    ticked = [str(i) for i in sorted(picked or [])]  # the panel's boxes: oldest run first
    wanted = ticked + [p for p in (ids or "").split(",") if p.strip()]
    if not wanted or not all(p.strip().isdigit() for p in wanted):
        raise NotFound("pick runs to compare: /bench/compare?ids=1,2 (run ids)")
    curves = [
        bench_compare.curve(r)
        for r in compare_runs(request, parse_ids(",".join(p.strip() for p in wanted)))
    ]
    return htmx.page(request, "bench_compare.html", page_context(request, actor, curves=curves))
