"""A deployment's calibrated profile: `POST /api/deployments/{name}/calibration` fits the
timing model to measurements of that deployment and keeps it (an operator's change): a
`pdctl bench --save-requests` result (`bench`), or its own live traffic (`source: live`, the
last requests its proxy logged, on the layout it runs); `GET` shows the one kept. The
planner's forecasts for the deployment (the advisor's, the autopilot's capacity) use it and
say so. Measurements the fit cannot use are a 422 naming the field that is wrong; a live
calibration of a deployment whose proxy does not answer is a 409 saying why.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request, status
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from controller import TimedSpec, timed_spec
from services.proposal_forecast import plan_config
from simulator.plan.calibration.fitting import Calibration, CalibrationError, calibrate
from simulator.plan.calibration.live import calibrate_served
from simulator.plan.planner import PlanError, parse_config
from web.deps import Operator, StoreDep
from web.errors import ConfigError, Conflict, NotFound
from web.proxy_log import proxy_log

router = APIRouter(tags=["calibration"])


class CalibrationRequest(BaseModel):
    source: Literal["bench", "live"] = Field(
        "bench", description="bench: fit `bench`; live: fit the proxy's logged requests"
    )
    bench: dict[str, Any] | list[dict[str, Any]] | None = Field(
        None,
        description="A `pdctl bench --save-requests` result (one rate or a sweep), or several "
        "(each rate with its own --seed); source bench only",
    )
    config: str | None = Field(
        None,
        description="The layout benched (kxtpM, or Pp-tpX+Dd-tpX); default: the one the "
        "deployment runs",
    )
    hold_out_rate: float | None = Field(
        None, description="Fit without this rate and report the error on it"
    )


@router.post("/deployments/{name}/calibration", status_code=status.HTTP_201_CREATED)
async def fit(
    name: str, body: CalibrationRequest, request: Request, store: StoreDep, actor: Operator
) -> dict[str, Any]:
    """Fit, keep as the deployment's profile, answer the profile and its error report."""
    spec = store.get(name).spec
    timed = timed_spec(spec)
    if isinstance(timed, str):
        raise ConfigError.at([body.source], f"deployment {name!r}: {timed}")
    config = body.config or plan_config(spec).spelled()
    try:
        if body.source == "live":
            done = await _live(request, name, body, timed, config)
        else:
            if body.bench is None:
                raise ConfigError.at(["bench"], "a bench calibration needs `bench`")
            done = await run_in_threadpool(
                calibrate,
                body.bench,
                timed.model,
                timed.hardware,
                config,
                body.hold_out_rate,
                f"a bench of {name}",
            )
    except CalibrationError as exc:
        if exc.field in ("config", "hold_out_rate"):
            where = [exc.field]
        else:
            where = [body.source] if body.source == "live" else ["bench", exc.field]
        raise ConfigError.at(where, str(exc)) from None
    profile = done.profile.to_json()
    request.app.state.calibrations.put(name, profile, actor.label)
    return {"deployment": name, "profile": profile, "report": done.report}


async def _live(
    request: Request, name: str, body: CalibrationRequest, timed: TimedSpec, config: str
) -> Calibration:
    for field in ("bench", "hold_out_rate"):
        if getattr(body, field) is not None:
            raise ConfigError.at([field], "a live calibration fits the proxy's log, not a bench")
    try:
        layout = parse_config(config)
    except PlanError as exc:
        raise ConfigError.at(["config"], str(exc)) from None
    lines, why = await proxy_log(request, name)
    if why is not None:
        raise Conflict(f"deployment {name!r}: cannot calibrate on its traffic: {why}")
    return await run_in_threadpool(
        calibrate_served,
        lines,
        timed.model,
        timed.hardware,
        layout,
        f"the live traffic of {name}",
        timed.time_scale,
    )


@router.get("/deployments/{name}/calibration")
def kept(name: str, request: Request, store: StoreDep) -> dict[str, Any]:
    store.get(name)  # 404 for a deployment that is not there
    row = request.app.state.calibrations.get(name)
    if row is None:
        raise NotFound(f"deployment {name!r} has no calibration (POST one)")
    return {
        "deployment": name,
        "actor": row.actor,
        "created_at": row.created_at,
        "profile": row.body,
    }
