"""Which model and hardware profiles time a deployment's instances, and how much slower than
modelled its wall clock runs: the planner's forecasts (services/proposal_forecast.py) and the
capacity model (controller/autopilot/capacity.py) both start here. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from controller.spec.deployment import DeploymentSpec, Engine
from domain import profiles


@dataclass(frozen=True, slots=True)
class TimedSpec:
    model: str  # profile names
    hardware: str
    time_scale: float  # wall seconds per modelled second: a stand-in's --time-scale, else 1


def timed_spec(spec: DeploymentSpec) -> TimedSpec | str:
    """The profiles of `spec`, or why it cannot be timed (a model with no profile; real vLLM
    on hardware the spec does not name)."""
    model = profiles.for_model(spec.model)
    if model is None:
        return f"no model profile for {spec.model!r}"
    sim = spec.engine is Engine.SIM
    hardware = spec.hardware or (profiles.default_hardware(model) if sim else None)
    if hardware is None:
        return "the deployment names no hardware profile (spec field hardware)"
    return TimedSpec(model, hardware, spec.time_scale if sim else 1.0)
