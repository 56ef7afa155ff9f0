"""Pure: how long each switch strategy takes and what it costs the requests, before it runs.

The steps of controller/switch/plan.py, each given a time: waiting for in-flight requests to
finish (the drain), a restart (the old process stopping, then its start: the median of the
starts the supervisor measured for that group, else the modelled start of
domain/engine/start_time.py)
and the proxy noticing it ready. From the times: the hold window (new requests wait in the
proxy's queue), the degraded window (whole requests, no hand-off) and the warnings when a
strategy cannot keep its promise (a hold longer than the queue's deadline answers 503).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from controller.spec.deployment import DeploymentSpec
from controller.switch.plan import STRATEGIES, Step, StepKind, SwitchRejected, plan


@dataclass(frozen=True, slots=True)
class StartEstimate:
    """How long one group's instance takes from spawn to ready, and where that comes from."""

    seconds: float
    source: str  # "measured" | "modelled"
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 2), "source": self.source, "detail": self.detail}


def measured_or(samples: list[float], modelled: StartEstimate) -> StartEstimate:
    """The median of measured starts when there are any, else the model's figure."""
    if not samples:
        return modelled
    median = statistics.median(samples)
    return StartEstimate(median, "measured", f"median of {len(samples)} measured starts")


@dataclass(frozen=True, slots=True)
class Costs:
    """The times besides the starts (seconds)."""

    drain_s: float | None = None  # in-flight requests finishing; None: not known yet
    stop_s: float = 0.5  # drained process SIGTERMed to gone
    ready_lag_s: float = 1.0  # ready to seen ready: the supervisor's health probe interval


@dataclass
class Forecast:
    strategy: str
    possible: bool
    refused: str | None = None
    duration_s: float = 0.0
    held_s: float | None = None
    degraded_s: float | None = None
    rejected_window_s: float = 0.0  # arrivals in this part of the hold get 503
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for key in ("duration_s", "held_s", "degraded_s", "rejected_window_s"):
            if out[key] is not None:
                out[key] = round(out[key], 2)
        return out


def _group(instance: str) -> str:
    return instance.rsplit("-", 1)[0]


def step_seconds(step: Step, starts: dict[str, StartEstimate], costs: Costs) -> float:
    if step.kind is StepKind.WAIT_IDLE:
        return costs.drain_s or 0.0
    if step.kind is StepKind.APPLY:  # the step's instances restart side by side
        slowest = max(starts[_group(i)].seconds for i in step.instances)
        return costs.stop_s + slowest
    if step.kind is StepKind.WAIT_READY:
        return costs.ready_lag_s
    return 0.0


def forecast(
    spec: DeploymentSpec,
    target: str,
    strategy: str,
    starts: dict[str, StartEstimate],
    costs: Costs,
    rate: float | None = None,
) -> Forecast:
    """`strategy`'s forecast; `rate` (requests/s, if known) turns windows into counts."""
    try:
        steps = plan(spec, target, strategy)
    except SwitchRejected as exc:
        return Forecast(strategy, False, refused=str(exc))
    out = Forecast(strategy, True)
    since: float | None = None
    for step in steps:
        if step.kind in (StepKind.HOLD_BEGIN, StepKind.DEGRADE_BEGIN):
            since = out.duration_s
        elif step.kind is StepKind.HOLD_END:
            out.held_s = out.duration_s - (since or 0.0)
        elif step.kind is StepKind.DEGRADE_END:
            out.degraded_s = out.duration_s - (since or 0.0)
        out.duration_s += step_seconds(step, starts, costs)
    _judge(out, spec, rate, costs)
    return out


def _judge(out: Forecast, spec: DeploymentSpec, rate: float | None, costs: Costs) -> None:
    deadline, queue = spec.proxy.hold_deadline_s, spec.proxy.hold_queue
    if costs.drain_s is None:
        out.notes.append(
            "in-flight requests finishing is not counted: no switch of this deployment "
            "has been measured yet (long outputs add their remaining decode time)"
        )
    if out.held_s is not None:
        out.rejected_window_s = max(0.0, out.held_s - deadline)
        if out.rejected_window_s > 0:
            count = f" (~{rate * out.rejected_window_s:.0f} at {rate:g} req/s)" if rate else ""
            out.warnings.append(
                f"hold pauses new requests for ~{out.held_s:.0f} s, longer than the proxy's "
                f"hold deadline ({deadline:g} s): requests arriving in the first "
                f"~{out.rejected_window_s:.0f} s of the hold get 503{count}"
            )
        if rate and rate * min(out.held_s, deadline) > queue:
            out.warnings.append(
                f"~{rate * min(out.held_s, deadline):.0f} requests would wait at {rate:g} "
                f"req/s, more than the hold queue's {queue}: the rest get 503"
            )
    if out.degraded_s is not None:
        out.notes.append(
            f"for ~{out.degraded_s:.0f} s one side serves whole requests (no hand-off): "
            "TTFT and ITL as colocated, on half the instances"
        )
    if out.strategy == "roll":
        out.notes.append("one prefill/decode pair at a time is out of service; nothing is held")


def forecasts(
    spec: DeploymentSpec,
    target: str,
    starts: dict[str, StartEstimate],
    costs: Costs,
    rate: float | None = None,
) -> list[Forecast]:
    """Every strategy's forecast (the refused ones say why)."""
    return [forecast(spec, target, s, starts, costs, rate) for s in STRATEGIES]
