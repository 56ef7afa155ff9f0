"""A calibrated profile: fitted step coefficients for one model at one TP degree on one
cluster, where they came from, and the timing model that runs on them.

The file is JSON (`pdctl calibrate --out`); `pdctl plan --calibration FILE` and a
deployment's stored profile read it back through `from_json`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from domain.profiles import HardwareProfile, ModelProfile
from simulator.model.calibration.fit import COEFFICIENTS, HandoffFit, StepCoefficients
from simulator.model.timing import StepBatch, StepTime, TimingModel

FORMAT = "pdctl-calibration/1"


class ProfileError(ValueError):
    """A calibration file that is not one, naming the field."""


@dataclass(frozen=True)
class CalibratedProfile:
    model: str
    hardware: str  # the cluster as the operator names it (its datasheet is what was wrong)
    tp: int
    steps: StepCoefficients
    # What TTFT carries beyond the engine's steps (HTTP, tokenizing, the first chunk's
    # write): measured TTFT p50 minus the calibrated replay's, averaged over the fitted rates.
    ttft_offset_s: float = 0.0
    handoff: HandoffFit | None = None
    source: str = ""
    fitted_rates: tuple[float, ...] = ()
    steps_fitted: int = 0
    error: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for the planner's and the advisor's output."""
        rates = ", ".join(f"{r:g}" for r in self.fitted_rates)
        where = f" from {self.source}" if self.source else ""
        return (
            f"calibrated{where}: {self.steps_fitted} measured steps at {rates} req/s "
            f"(TP{self.tp}; {self.hardware}'s datasheet timing not used)"
        )

    def coefficients(self) -> dict[str, float]:
        values = {name: getattr(self.steps, name) for name in COEFFICIENTS}
        values["ttft_offset_s"] = self.ttft_offset_s
        if self.handoff is not None:
            values["handoff_setup_s"] = self.handoff.setup_s
            values["handoff_token_s"] = self.handoff.token_s
        return values

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["format"] = FORMAT
        out["fitted_rates"] = list(self.fitted_rates)
        return out


def from_json(data: Any) -> CalibratedProfile:
    """A profile from what `to_json` wrote; ProfileError naming the first field that is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProfileError(f"format: not a calibrated profile (expected {FORMAT!r})")
    for key, kind in (("model", str), ("hardware", str), ("tp", int), ("steps", dict)):
        if not isinstance(data.get(key), kind):
            raise ProfileError(f"{key}: missing or not a {kind.__name__}")
    steps = data["steps"]
    values = []
    for name in COEFFICIENTS:
        value = steps.get(name)
        if not isinstance(value, int | float) or value < 0:
            raise ProfileError(f"steps.{name}: missing or negative")
        values.append(float(value))
    handoff = data.get("handoff")
    return CalibratedProfile(
        model=data["model"],
        hardware=data["hardware"],
        tp=data["tp"],
        steps=StepCoefficients(*values),
        ttft_offset_s=float(data.get("ttft_offset_s", 0.0)),
        handoff=HandoffFit(**handoff) if isinstance(handoff, dict) else None,
        source=str(data.get("source", "")),
        fitted_rates=tuple(float(r) for r in data.get("fitted_rates", ())),
        steps_fitted=int(data.get("steps_fitted", 0)),
        error=dict(data.get("error") or {}),
    )


class CalibratedTiming(TimingModel):
    """The timing model with its step times from the fitted coefficients instead of the
    roofline; everything else (the KV pool, the model's shape) stays the profile's."""

    def __init__(
        self, model: ModelProfile, hardware: HardwareProfile, tp: int, steps: StepCoefficients
    ) -> None:
        super().__init__(model, hardware, tp)
        self.steps = steps

    def step(self, batch: StepBatch) -> StepTime:
        if batch.tokens == 0:
            return StepTime(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        s = self.steps
        # Prompt tokens already cached before a chunk are read like a decode's context.
        ctx = batch.decode_ctx_tokens + batch.prefill_ctx_tokens
        linear = s.decode_seq_s * batch.decode_seqs + s.prefill_token_s * batch.prefill_tokens
        attention = s.ctx_token_s * ctx
        total = s.base_s + linear + attention
        return StepTime(total, linear, 0.0, attention, 0.0, s.base_s)
