"""The what-if planner on the dashboard: `POST /api/plan` (JSON) and the page `/plan` (a form,
the slo_attainment-vs-rate chart, the rows, max_goodput_rate and the calibration).

Anyone who may read may plan: it changes nothing. It is CPU work, so services/plan_runner.py
bounds it, one plan runs at a time per server (another gets 429), in a worker thread.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from domain import profiles
from services.plan_runner import MAX_ROWS, execute, kept_profile
from services.plan_schema import MAX_PROMPTS, NAMED, PlanRequest
from simulator.plan.printing import layout_text
from simulator.plan.scenarios import SCENARIOS
from web import htmx
from web.errors import ErrorOut, TooManyRequests
from web.views.form_fields import errors_at_fields, pydantic_detail
from web.views.page import PageActor, page_context

router = APIRouter(tags=["plan"])  # under /api, behind a token
page_router = APIRouter(tags=["pages"], include_in_schema=False)

SCENARIO_RATES = "0.5:10:0.5"


class PlannerBusy(TooManyRequests):
    title = "A plan is running"
    retry_after = 5


async def run(request: Request, req: PlanRequest) -> dict[str, Any]:
    """One plan at a time per server, in a worker thread."""
    state = request.app.state
    if getattr(state, "plan_running", False):
        raise PlannerBusy("a plan is already running on this server; try again in a few seconds")
    calibration = kept_profile(req, state.calibrations)
    state.plan_running = True
    try:
        return await run_in_threadpool(execute, req, state.settings.plan_deadline_s, calibration)
    finally:
        state.plan_running = False


@router.post("/plan", responses={429: {"model": ErrorOut, "description": "A plan is running."}})
async def plan(body: PlanRequest, request: Request) -> dict[str, Any]:
    """Serve a workload on candidate layouts on the virtual clock: per configuration and
    rate, requests meeting TTFT, ITL and both, p50/p99 TTFT and ITL, the failed target;
    max_goodput_rate per configuration; the calibration in use."""
    return await run(request, body)


# -- the page ------------------------------------------------------------------------------


FORM_DEFAULTS = {"configs": "\n".join(NAMED), "rates": SCENARIO_RATES}
# The prefix-caching field: vLLM's default for the device (on) unless told, as `pdctl plan`.
PREFIX_CACHING: dict[bool | None, str] = {None: "default", True: "on", False: "off"}


def form_values(req: PlanRequest) -> dict[str, str]:
    """A request as the page's flat form fields (dotted names)."""
    flat: dict[str, str] = {}

    def walk(prefix: str, data: Mapping[str, Any]) -> None:
        for key, value in data.items():
            if isinstance(value, Mapping):
                walk(f"{prefix}{key}.", value)
            elif isinstance(value, bool):
                flat[prefix + key] = "on" if value else ""
            elif not isinstance(value, list):
                flat[prefix + key] = "" if value is None else str(value)

    walk("", req.model_dump(exclude={"configs", "rates", "search_modes"}))
    flat["prefix_caching"] = PREFIX_CACHING[req.colocated_flags.prefix_caching]
    flat["gpus"] = ""  # blank: 8, or nodes x GPUs per node when nodes are given
    return {**flat, **FORM_DEFAULTS}


def body_of(form: Mapping[str, str]) -> dict[str, Any]:
    """The page's form fields as a PlanRequest body; empty fields take the defaults."""
    body: dict[str, Any] = {}
    for key, value in form.items():
        if key in ("run", "prefix_caching", "search") or value.strip() == "":
            continue
        node = body
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value.strip()
    if "configs" in body:
        body["configs"] = [c for c in re.split(r"[\s,]+", body["configs"]) if c]
    body["search"] = bool(form.get("search"))
    caching = {v: k for k, v in PREFIX_CACHING.items()}.get(form.get("prefix_caching", ""))
    for role in ("colocated_flags", "prefill_flags", "decode_flags"):
        body.setdefault(role, {})["prefix_caching"] = caching
    return body


@page_router.get("/plan", response_class=HTMLResponse)
async def plan_page(request: Request, actor: PageActor) -> HTMLResponse:
    """The form (the MORI-IO scenario's values); with `run=1` also the result."""
    form = dict(request.query_params)
    values = {**form_values(PlanRequest()), **form}
    errors: dict[str, list[str]] = {}
    general: list[str] = []
    result = None
    if form.get("run"):
        try:
            result = await run(request, PlanRequest.model_validate(body_of(form)))
        except ValidationError as exc:
            errors, general = errors_at_fields(
                pydantic_detail(exc.errors(include_url=False)), values
            )
        except RequestValidationError as exc:
            errors, general = errors_at_fields(exc.errors(), values)
    ctx = page_context(
        request,
        actor,
        v=values,
        errors=errors,
        general=general,
        result=result,
        chart=chart(result) if result else None,
        layouts={k: layout_text(v) for k, v in (result or {}).get("layouts", {}).items()},
        scenarios=list(SCENARIOS),
        models=profiles.available("models"),
        hardware=profiles.available("hardware"),
        calibrated=request.app.state.calibrations.names(),
        max_rows=MAX_ROWS,
        max_prompts=MAX_PROMPTS,
    )
    status = 422 if errors or general else 200
    if htmx.is_htmx(request):
        return htmx.fragment(request, "plan.html", "plan", ctx, status)
    return htmx.page(request, "plan.html", ctx, status)


def chart(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """slo_attainment vs rate, one series per configuration (uPlot's columns)."""
    rows = result.get("rows") or []
    if not rows:
        return None
    rates = sorted({r["rate"] for r in rows})
    by_config: dict[str, dict[float, float]] = {}
    for r in rows:
        by_config.setdefault(r["config"], {})[r["rate"]] = r["slo_attainment"]
    return {
        "rates": rates,
        "share": result.get("goodput_share"),
        "series": [
            {"label": label, "values": [points.get(x) for x in rates]}
            for label, points in by_config.items()
        ],
    }
