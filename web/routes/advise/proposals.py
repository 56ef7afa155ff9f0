"""The advisor's verdicts as changes an operator applies in one step:
`GET /api/deployments/{name}/proposals` (each triggered verdict that recommends a change, the
change as a diff of the spec, how it is carried out, and the planner's forecast of its effect
on this deployment's measured workload) and `POST .../proposals/apply` (the change, made from
the revision it was shown on, audited as an `advisor.apply` event).

The change comes from controller/proposals.py, the forecast from services/proposal_forecast.py; a
verdict is read again when applied, so nothing is applied on advice that no longer holds."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller import (
    PROPOSING_RULES,
    Change,
    Engine,
    StoreRevisions,
    Target,
    attach_refusal,
    propose,
)
from domain.errors import ConfigError, InvalidTransition, PdctlError
from services.calibrations import kept_calibration
from services.proposal_cost import restart_cost
from services.proposal_forecast import forecast
from services.rollouts import last_applied, running, store_and_roll_out
from state.errors import StaleRevision
from state.store import Current, Store
from web import htmx
from web.deps import INT64_MAX, Operator, ServiceDep, StoreDep, get_service
from web.diff import describe, diff
from web.schemas import ChangeOut
from web.views.live_advice import live
from web.views.page import PageActor, page_context, require_operator

router = APIRouter(prefix="/deployments/{name}", tags=["advice"])
page_router = APIRouter(tags=["pages"], include_in_schema=False)

Window = Literal["10s", "1m", "5m"]
FORECAST_TTL_S = 30.0  # a page polling its panel replays the planner at most this often
ROLE_MOVE_DRAIN_S = 300.0  # saturated decodes take minutes to pull a prefill's last KV


def proposals_of(request: Request, store: Store, name: str, window: str) -> dict[str, Any]:
    """The triggered verdicts that carry a change for this deployment, without forecasts."""
    current = store.get(name)
    advice = live(request, store, name, window)
    items = []
    for verdict in advice["verdicts"]:
        triggered = verdict["triggered"]
        change = propose(current.spec, verdict["rule"], verdict["evidence"]) if triggered else None
        if change is not None:
            items.append({**_shown(verdict, change, current), "change_obj": change})
    return {"current": current, "advice": advice, "items": items}


async def shown_proposals(request: Request, store: Store, name: str, window: str) -> dict:
    """The advice and its proposals, each with its forecast (the API and the page's panel)."""
    found = proposals_of(request, store, name, window)
    current, signals = found["current"], found["advice"]["signals"]
    out = []
    for item in found["items"]:
        change = item.pop("change_obj")
        item["forecast"] = await _forecast(request, current, change, signals)
        cost = await _cost(request, store, current, change, signals)
        if cost is not None:  # what the rollout would really restart, and what that costs
            item["cost"], item["disruption"] = cost, cost["disruption"]
        out.append(item)
    return {"advice": found["advice"], "revision": current.revision, "proposals": out}


@router.get("/proposals")
async def list_proposals(
    name: str,
    request: Request,
    store: StoreDep,
    window: Annotated[Window, Query(description="the live frame's window")] = "1m",
) -> dict[str, Any]:
    """Each triggered verdict that recommends a change: the change (summary, how it is
    carried out, what it costs while it runs, the spec fields it changes), the signal it is
    predicted to move, and the planner's forecast on the measured workload."""
    found = await shown_proposals(request, store, name, window)
    return {
        "deployment": name,
        "revision": found["revision"],
        "window": window,
        "live": found["advice"]["live"],
        # why nothing is proposed from this window (domain/measures/evidence.py), or None
        "not_enough_evidence": found["advice"].get("not_enough_evidence"),
        "proposals": found["proposals"],
    }


class ApplyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    rule: str = Field(min_length=1, max_length=80, description="The verdict's rule.")
    revision: int = Field(ge=1, le=INT64_MAX, description="The revision the proposal was shown on.")
    reason: str | None = Field(None, max_length=500, description="Kept with the change.")
    window: Window = Field("1m", description="The window whose verdict must still hold.")


@router.post("/proposals/apply")
async def apply_proposal(
    name: str,
    body: ApplyRequest,
    request: Request,
    store: StoreDep,
    controller: ServiceDep,
    actor: Operator,
) -> dict[str, Any]:
    """Apply one proposal: a runtime role move, a zero-loss mode switch, or the new spec as
    the next revision (a running deployment restarts on it). 409 when the deployment has
    moved past `revision` or the verdict no longer holds; 422 for a rule that proposes no
    change here."""
    if body.rule not in PROPOSING_RULES:
        known = ", ".join(sorted(PROPOSING_RULES))
        raise ConfigError.at(("rule",), f"rule {body.rule!r} proposes no change; these do: {known}")
    current = store.get(name)
    if current.revision != body.revision:
        raise StaleRevision(
            f"deployment {name!r} is at revision {current.revision}; the proposal was shown on "
            f"revision {body.revision}: read the proposals again",
            current.revision,
        )
    found = proposals_of(request, store, name, body.window)
    verdict = next(v for v in found["advice"]["verdicts"] if v["rule"] == body.rule)
    if not verdict["triggered"]:
        raise InvalidTransition(
            f"the {body.rule} verdict does not hold in the {body.window} window now "
            f"({verdict['advice']}): nothing applied"
        )
    item = next((i for i in found["items"] if i["rule"] == body.rule), None)
    if item is None:
        raise ConfigError.at(
            ("rule",), f"the {body.rule} verdict recommends no change this deployment can make"
        )
    change: Change = item.pop("change_obj")
    predicted = await _forecast(request, current, change, found["advice"]["signals"])
    reason = body.reason or f"advisor: {body.rule}"
    applied = await _carry_out(store, controller, current, change, actor.label, reason)
    detail = {
        "rule": body.rule,
        "how": change.how,
        "summary": change.summary,
        "from_revision": current.revision,
        **applied,
        "evidence": verdict["evidence"],
        "watch": {"signal": change.watch, "direction": change.direction},
        "forecast": predicted,
    }
    controller.record(
        actor.label,
        "advisor.apply",
        f"{name}: applied the {body.rule} advice: {change.summary} ({reason})",
        name,
        detail,
    )
    return {"deployment": name, **item, "forecast": predicted, **applied}


async def _carry_out(
    store: Store, controller: Any, current: Current, change: Change, actor: str, reason: str
) -> dict[str, Any]:
    name = current.name
    if current.spec.attached and change.how == "switch":  # pdctl restarts nothing it attached
        groups = [g.model_copy(update={"mode": change.mode}) for g in current.spec.groups]
        raise attach_refusal(
            name, "proposal", current.spec, current.spec.model_copy(update={"groups": groups})
        )
    if change.how == "role_move":
        moved = await controller.move_role(
            name,
            current.spec,
            change.instance,
            change.role,
            store=store,
            actor=actor,
            reason=reason,
            drain_timeout_s=ROLE_MOVE_DRAIN_S,
        )
        return {"revision": moved.get("revision"), "move": moved}
    if change.how == "switch":
        roles = [g.role.value for g in current.spec.groups for _ in range(g.count)]
        strategy = "roll" if roles.count("prefill") >= 2 and roles.count("decode") >= 2 else "hold"
        record = await controller.switch(
            name,
            current.spec,
            current.ports,
            change.mode,
            strategy,
            actor,
            reason,
            StoreRevisions(store),
            back=last_applied(store, name),
        )
        shown = record.to_json()
        return {"revision": shown.get("revision"), "switch": shown}
    done = await store_and_roll_out(
        store,
        controller,
        name,
        change.spec,
        actor,
        reason,
        based_on=current.revision,
        kind="advisor",
    )
    rec = done.rollout
    return {
        "revision": done.current.revision,
        "restarted": rec is not None,
        "rollout": rec.to_json() if rec is not None else None,
    }


def _shown(verdict: dict[str, Any], change: Change, current: Current) -> dict[str, Any]:
    old, new = current.spec.model_dump(mode="json"), change.spec.model_dump(mode="json")
    return {
        "rule": verdict["rule"],
        "advice": verdict["advice"],
        "evidence": verdict["evidence"],
        **change.to_json(),
        "changes": [ChangeOut.of(c).model_dump() for c in diff(old, new)],
        "changes_text": describe(old, new),  # the same, as lines a person reads
    }


async def _cost(
    request: Request, store: Store, current: Current, change: Change, signals: dict[str, Any]
) -> dict[str, Any] | None:
    """A new revision's cost from what rolling it out would do now (the rollout engine's
    forecast and this deployment's measured starts), cached as the forecasts are; None for a
    role move or a switch (their own words hold) or where it cannot be said."""
    if change.how != "revision":
        return None
    controller = request.app.state.controller
    name = current.name
    if not running(controller, name):
        return None  # stored, then started on it: nothing runs to disturb
    cache: dict[tuple, tuple[float, dict]] | None = getattr(request.app.state, "costs", None)
    if cache is None:
        cache = request.app.state.costs = {}
    key = (name, current.revision, change.rule)
    hit = cache.get(key)
    if hit is not None and time.monotonic() - hit[0] < FORECAST_TTL_S:
        return hit[1]
    try:
        saved = store.update(name, change.spec, "advisor", None, dry_run=True)
        preview = await controller.forecast_apply(
            name, Target(saved.revision, saved.spec, saved.ports)
        )
    except PdctlError:
        return None
    scale = current.spec.time_scale if current.spec.engine is Engine.SIM else 1.0
    rate = signals.get("request_rate")
    result = restart_cost(
        preview,
        controller.start_times(name),
        rate / scale if isinstance(rate, int | float) else None,  # the wall clock's req/s
        current.spec.proxy.hold_deadline_s,
    )
    if len(cache) > 256:
        cache.clear()
    cache[key] = (time.monotonic(), result)
    return result


async def _forecast(
    request: Request, current: Current, change: Change, signals: dict[str, Any]
) -> dict[str, Any]:
    """The planner's forecast, cached per deployment revision, rule and workload."""
    cache: dict[tuple, tuple[float, dict]] | None = getattr(request.app.state, "forecasts", None)
    if cache is None:
        cache = request.app.state.forecasts = {}
    workload = tuple(
        round(float(signals.get(k) or 0), 1)
        for k in ("prompt_tokens_mean", "output_tokens_mean", "request_rate", "burstiness")
    )
    kept = kept_calibration(getattr(request.app.state, "calibrations", None), current.name)
    key = (current.name, current.revision, change.rule, workload, kept.at)
    hit = cache.get(key)
    if hit is not None and time.monotonic() - hit[0] < FORECAST_TTL_S:
        return hit[1]
    result = await asyncio.to_thread(forecast, current.spec, change, signals, kept.profile)
    if len(cache) > 256:
        cache.clear()
    cache[key] = (time.monotonic(), result)
    return result


# -- the advisor panel's Apply button ----------------------------------------------------------


@page_router.post("/deployments/{name}/proposals/apply", response_class=HTMLResponse)
async def apply_from_page(
    name: str, request: Request, store: StoreDep, actor: PageActor
) -> HTMLResponse:
    """Apply from the panel's form; the panel comes back with what happened in a notice (a
    refusal too: a viewer, a stale revision, a verdict that no longer holds)."""
    form = {k: str(v) for k, v in (await request.form()).items()}
    window = form["window"] if form.get("window") in ("10s", "1m", "5m") else "1m"
    try:
        require_operator(actor)
        body = ApplyRequest.model_validate(
            {
                "rule": form.get("rule", ""),
                "revision": form.get("revision") or 0,
                "reason": form.get("reason", "").strip() or None,
                "window": window,
            }
        )
        applied = await apply_proposal(name, body, request, store, get_service(request), actor)
        notice, ok = (
            f"applied {body.rule}: {applied['summary']} (revision {applied['revision']})",
            True,
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        notice, ok = f"{'.'.join(map(str, first['loc']))}: {first['msg']}", False
    except PdctlError as exc:
        notice, ok = exc.message, False
    found = await shown_proposals(request, store, name, window)
    ctx = page_context(
        request,
        actor,
        advice=found["advice"],
        proposals=found["proposals"],
        revision=found["revision"],
        proposal_notice=notice,
        proposal_ok=ok,
    )
    return htmx.page(request, "_advice.html", ctx)
