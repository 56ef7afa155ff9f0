"""What the switch API and dialog say before a switch: each strategy's forecast
(controller/switch/forecast.py) from the starts the supervisor measured for the deployment's
instances, else from the modelled start (domain/engine/start_time.py) of its model on its hardware;
the drain from the switches of this deployment measured so far."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any, Protocol

from controller.launch.render import sim_model_profile
from controller.spec.deployment import DeploymentSpec, Engine, Role
from controller.switch.forecast import Costs, StartEstimate, forecasts, measured_or
from domain import profiles
from domain.engine.start_time import start_parts

# The stand-in's own process start besides the modelled one (issue 20: "the stand-in starts in
# half a second"), and vLLM's when pdctl has no profile of the model to model it.
SIM_OWN_START_S = 0.5
UNMODELLED_START_S = 60.0


def modelled_start(spec: DeploymentSpec, tp: int) -> StartEstimate:
    """A warm restart of one instance of `spec` over `tp` GPUs (a switch restarts in place)."""
    profile = sim_model_profile(spec.model)
    if profile is None:
        return StartEstimate(
            UNMODELLED_START_S, "assumed", f"no profile of {spec.model!r} to model its start"
        )
    hardware = spec.hardware or profiles.default_hardware(profile)
    parts = start_parts(profiles.model(profile), profiles.hardware(hardware), tp, "warm")
    what = f"{profile} on {tp} x {hardware}: {parts.describe()}"
    if spec.engine is Engine.SIM:
        scale = spec.time_scale * spec.start_time_scale
        seconds = parts.total_s * scale + SIM_OWN_START_S
        return StartEstimate(
            seconds, "modelled", f"{what}; stand-in x {scale:g} + {SIM_OWN_START_S} s"
        )
    return StartEstimate(parts.total_s, "modelled", what)


def start_estimates(
    spec: DeploymentSpec, measured: dict[str, list[float]]
) -> dict[str, StartEstimate]:
    return {
        g.name: measured_or(measured.get(g.name, []), modelled_start(spec, g.tp))
        for g in spec.groups
        if g.role in (Role.PREFILL, Role.DECODE)
    }


class Finished(Protocol):
    """A switch as its record tells it (controller/rollout/record.py)."""

    state: str
    timings: list[dict[str, Any]]


def measured_drain(history: Sequence[Finished]) -> float | None:
    """The median wait for in-flight requests over this deployment's finished switches."""
    waits = [
        t["seconds"]
        for rec in history
        if rec.state == "done"
        for t in rec.timings
        if t["step"].startswith("wait_idle")
    ]
    return statistics.median(waits) if waits else None


def preview(
    spec: DeploymentSpec,
    target: str,
    measured: dict[str, list[float]],
    history: Sequence[Finished],
    rate: float | None = None,
) -> dict[str, Any]:
    starts = start_estimates(spec, measured)
    costs = Costs(drain_s=measured_drain(history))
    return {
        "target": target,
        "hold_deadline_s": spec.proxy.hold_deadline_s,
        "hold_queue": spec.proxy.hold_queue,
        "rate": rate,
        "starts": {name: s.to_json() for name, s in starts.items()},
        "drain_s": costs.drain_s,
        "strategies": [f.to_json() for f in forecasts(spec, target, starts, costs, rate)],
    }
