"""The P:D ratio autopilot in a deployment's spec: `autopilot` set (opt-in) lets the control
plane move one instance at a time between prefill and decode by runtime role switching
(controller/switch/role_move.py) when live signals say the deployment is TTFT-bound or ITL-bound
(controller/autopilot/decide.py decides, services/autopilot_loop.py runs it). It needs
`role_switch`.

Pure: pydantic and the check relating `autopilot` to the rest of the spec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from controller.spec.field_error import FieldError
from domain.modes import Role
from domain.role_moves import DRAIN_TIMEOUT_S

if TYPE_CHECKING:
    from controller.spec.deployment import DeploymentSpec


class Autopilot(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = True
    dry_run: bool = False  # decide and record what it would do; move nothing
    window_s: float = Field(60.0, ge=5, le=3600)  # a signal must hold this long (hysteresis)
    cooldown_s: float = Field(300.0, ge=0, le=86400)  # since the last move
    min_per_role: int = Field(1, ge=1, le=64)  # instances each of prefill and decode keeps
    max_moves_per_hour: int = Field(4, ge=1, le=60)
    drain_timeout_s: float = Field(DRAIN_TIMEOUT_S, gt=0, le=3600)  # see domain/role_moves
    # A signal: attainment below this share of requests, a queue, a gauge over its line.
    attainment_target: float = Field(0.9, gt=0, le=1)
    prefill_waiting_per_instance: float = Field(2.0, gt=0, le=10_000)
    kv_usage_high: float = Field(0.9, gt=0, le=1)
    # Lead from the arrivals' mix where a capacity model exists (controller/autopilot_demand):
    # a role whose arrivals need more than `demand_high` of what it gives is short now.
    lead_from_arrivals: bool = True
    demand_high: float = Field(1.0, gt=0, le=10)
    # The arrivals' mix is read over this much of the window (the newest part): a shorter
    # span follows a shift sooner, with more noise; a longer one than window_s reads it all.
    lead_window_s: float = Field(30.0, ge=5, le=3600)


def check_autopilot(spec: DeploymentSpec) -> None:
    """The autopilot moves instances by runtime role switch: role_switch must be set, and
    each role must have more instances than it keeps for a move to be possible at all."""
    ap = spec.autopilot
    if ap is None:
        return
    if spec.role_switch is None:
        raise FieldError(
            ("autopilot",),
            "the autopilot moves instances by runtime role switching: set role_switch: {} too",
        )
    if sum(g.count for g in spec.groups if g.role is not Role.RENDER) < 2 * ap.min_per_role + 1:
        raise FieldError(
            ("autopilot", "min_per_role"),
            f"with {ap.min_per_role} kept per role the deployment needs at least "
            f"{2 * ap.min_per_role + 1} prefill and decode instances for a move to be possible",
        )
