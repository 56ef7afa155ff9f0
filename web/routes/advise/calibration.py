"""A deployment's calibrated profile: `POST /api/deployments/{name}/calibration` fits the
timing model to a `pdctl bench --save-requests` result of that deployment and keeps it (an
operator's change); `GET` shows the one kept. The planner's forecasts for the deployment (the
advisor's, the autopilot's capacity) use it and say so. A bench the fit cannot use is a 422
naming the field of `bench` that is wrong."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from controller import timed_spec
from simulator.plan.calibration.fitting import CalibrationError, calibrate
from web.deps import Operator, StoreDep
from web.errors import ConfigError, NotFound

router = APIRouter(tags=["calibration"])


class CalibrationRequest(BaseModel):
    bench: dict[str, Any] | list[dict[str, Any]] = Field(
        description="A `pdctl bench --save-requests` result (one rate or a sweep), or several "
        "(each rate with its own --seed)"
    )
    config: str = Field("1xtp1", description="The layout benched: colocated kxTPm")
    hold_out_rate: float | None = Field(
        None, description="Fit without this rate and report the error on it"
    )


@router.post("/deployments/{name}/calibration", status_code=status.HTTP_201_CREATED)
async def fit(
    name: str, body: CalibrationRequest, request: Request, store: StoreDep, actor: Operator
) -> dict[str, Any]:
    """Fit, keep as the deployment's profile, answer the profile and its error report."""
    timed = timed_spec(store.get(name).spec)
    if isinstance(timed, str):
        raise ConfigError.at(["bench"], f"deployment {name!r}: {timed}")
    try:
        done = await run_in_threadpool(
            calibrate,
            body.bench,
            timed.model,
            timed.hardware,
            body.config,
            body.hold_out_rate,
            f"a bench of {name}",
        )
    except CalibrationError as exc:
        where = [exc.field] if exc.field in ("config", "hold_out_rate") else ["bench", exc.field]
        raise ConfigError.at(where, str(exc)) from None
    profile = done.profile.to_json()
    request.app.state.calibrations.put(name, profile, actor.label)
    return {"deployment": name, "profile": profile, "report": done.report}


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
