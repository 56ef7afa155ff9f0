"""The advisor over measured data: `GET /api/deployments/{name}/advice` (live frames and
history), `POST /api/advice` (a signals dict, a bench result or a plan result), and the
deployment page's advisor panel (a fragment it polls).

Signals come from observe/advice/signals.py, verdicts from observe/advice/advisor.py; each verdict
names
the signals it read and where each came from, or why it is absent."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from observe.advice import signals
from observe.frames import WINDOWS
from observe.scrape.topics import DEFAULT_WINDOW
from web import htmx
from web.deps import INT64_MAX, StoreDep
from web.routes.advise.proposals import shown_proposals
from web.views.live_advice import live
from web.views.page import PageActor, page_context

router = APIRouter(tags=["advice"])  # under /api, behind a token
page_router = APIRouter(tags=["pages"], include_in_schema=False)

Window = Annotated[Literal["10s", "1m", "5m"], Query(description="the frame's window")]
MAX_RESULTS = 200


@router.get("/deployments/{name}/advice")
def deployment_advice(
    name: str, request: Request, store: StoreDep, window: Window = DEFAULT_WINDOW
) -> dict[str, Any]:
    """Each advisor rule's verdict on the deployment's live measurements: triggered (true,
    false, or null when a signal it needs is absent), the advice, the numbers behind it, and
    each signal's source."""
    return live(request, store, name, window)


class SignalsIn(BaseModel):
    """The advisor's signals (observe/advice/advisor.py); any may be left out."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    topology: Literal["colocated", "disaggregated"] | None = None
    slo_ttft_ms: float | None = Field(None, gt=0)
    slo_itl_ms: float | None = Field(None, gt=0)
    ttft_p99_ms: float | None = Field(None, ge=0)
    itl_p99_ms: float | None = Field(None, ge=0)
    itl_p50_ms: float | None = Field(None, ge=0)
    spike_prefill_overlap: float | None = Field(None, ge=0, le=1)
    prompt_tokens_mean: float | None = Field(None, ge=0)
    concurrency_mean: float | None = Field(None, ge=0)
    kv_transfer_gbps: float | None = Field(None, ge=0)
    transfer_share_of_ttft: float | None = Field(None, ge=0)
    multi_turn_share: float | None = Field(None, ge=0, le=1)
    frontend_cpu_share: float | None = Field(None, ge=0)
    request_rate: float | None = Field(None, ge=0)
    burstiness: float | None = Field(None, gt=0)
    prefix_hit_rate: float | None = Field(None, ge=0, le=1)
    slo_attainment: float | None = Field(None, ge=0, le=1)
    pd_recomputing_decodes: int | None = Field(None, ge=0, le=INT64_MAX)
    pd_transfer_share: float | None = Field(None, ge=0, le=1)
    pd_failed_transfers: float | None = Field(None, ge=0)


class AdviceRequest(BaseModel):
    """Exactly one of `signals`, `bench` (a `pdctl bench --result-json` document: one run, or
    a sweep with `runs`) and `plan` (a `pdctl plan --json` or POST /api/plan result).
    `rate` and `config` pick runs or rows; `topology` completes a bench result."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    signals: SignalsIn | None = None
    bench: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    rate: float | None = Field(None, gt=0, description="only the runs/rows at this rate")
    config: str | None = Field(None, max_length=200, description="only this plan config")
    topology: Literal["colocated", "disaggregated"] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> AdviceRequest:
        given = [k for k in ("signals", "bench", "plan") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of signals, bench, plan")
        return self


@router.post("/advice")
def advise(body: AdviceRequest) -> dict[str, Any]:
    """Each advisor rule's verdict on given signals, or on each run of a bench result or
    each row of a plan result (`results`, one entry per run or row)."""
    if body.signals is not None:
        derived = signals.Derived()
        for key, value in body.signals.model_dump(exclude_none=True).items():
            derived.put(key, value, "given")
        return {"source": "signals", "results": [{"label": "given", **signals.advice(derived)}]}
    if body.bench is not None:
        runs = body.bench.get("runs", [body.bench])
        items = [
            (f"{_rate(r)} req/s", signals.from_bench(r, body.topology))
            for r in _listed(runs, "bench", "runs")
            if _picked(r.get("request_rate"), body)
        ]
        return {"source": "bench", "results": _results(items, "bench")}
    plan = body.plan or {}
    rows = [
        r
        for r in _listed(plan.get("rows"), "plan", "rows")
        if _picked(r.get("rate"), body) and body.config in (None, r.get("config"))
    ]
    items = [(f"{r.get('config')} @ {_rate(r)} req/s", signals.from_plan(plan, r)) for r in rows]
    return {"source": "plan", "results": _results(items, "plan")}


def _listed(value: Any, field: str, key: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise RequestValidationError(
            [
                {
                    "loc": ("body", field, key),
                    "type": "value_error",
                    "msg": f"expected a list of {key} objects",
                }
            ]
        )
    if len(value) > MAX_RESULTS:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", field, key),
                    "type": "value_error",
                    "msg": f"at most {MAX_RESULTS} {key}",
                }
            ]
        )
    return value


def _rate(item: dict[str, Any]) -> str:
    rate = item.get("request_rate", item.get("rate"))
    return f"{rate:g}" if isinstance(rate, int | float) else str(rate)


def _picked(rate: Any, body: AdviceRequest) -> bool:
    return body.rate is None or (isinstance(rate, int | float) and abs(rate - body.rate) < 1e-9)


def _results(items: list[tuple[str, signals.Derived]], field: str) -> list[dict[str, Any]]:
    if not items:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "rate"),
                    "type": "value_error",
                    "msg": f"no {field} run or row matches rate/config",
                }
            ]
        )
    return [{"label": label, **signals.advice(d)} for label, d in items]


# -- the deployment page's panel -------------------------------------------------------------


@page_router.get("/deployments/{name}/advice", response_class=HTMLResponse)
async def advice_fragment(
    name: str,
    request: Request,
    store: StoreDep,
    actor: PageActor,
    window: Annotated[str, Query()] = DEFAULT_WINDOW,
) -> HTMLResponse:
    """The advisor panel's content; the whole of _advice.html is the fragment."""
    window = window if window in WINDOWS else DEFAULT_WINDOW
    found = await shown_proposals(request, store, name, window)
    ctx = page_context(
        request,
        actor,
        advice=found["advice"],
        proposals=found["proposals"],
        revision=found["revision"],
    )
    return htmx.page(request, "_advice.html", ctx)  # NotFound: web/errors.py answers it
