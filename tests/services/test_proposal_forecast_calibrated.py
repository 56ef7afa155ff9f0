"""The advisor's forecast on a deployment's calibrated profile: measured steps instead of the
datasheet when the profile times every engine of both layouts, and the forecast says which."""

from __future__ import annotations

from controller import Change
from controller.spec.deployment import DeploymentSpec
from services.proposal_forecast import forecast
from simulator.model.calibration.fit import StepCoefficients
from simulator.model.calibration.profile import CalibratedProfile
from tests.specs import colocated

MODEL = "llama-3.1-8b"
SIGNALS = {"prompt_tokens_mean": 1024, "output_tokens_mean": 64, "request_rate": 4.0}


def _change(tp: int = 1) -> tuple[DeploymentSpec, Change]:
    now = DeploymentSpec.model_validate(colocated("cal", model=MODEL, hardware="l40s"))
    body = colocated("cal", model=MODEL, hardware="l40s", count=2)
    body["groups"][0]["tp"] = tp
    after = DeploymentSpec.model_validate(body)
    return now, Change("scale", "one more", after, "revision", "itl_p99_ms", "down", "none")


def _profile(**over) -> CalibratedProfile:
    steps = StepCoefficients(base_s=0.008, decode_seq_s=0.0, ctx_token_s=0.0, prefill_token_s=1e-5)
    return CalibratedProfile(
        **{"model": MODEL, "hardware": "l40s", "tp": 1, "steps": steps, **over}
    )


def test_a_calibrated_forecast_runs_on_the_measured_steps_and_says_so() -> None:
    now, change = _change()
    plain = forecast(now, change, SIGNALS)
    measured = forecast(now, change, SIGNALS, _profile(source="bench.json"))
    assert plain["timing"] == f"datasheet timing of {MODEL} on l40s"
    assert measured["timing"].startswith("calibrated from bench.json")
    # the L40S datasheet's decode step is ~25 ms; the measured one 8 ms
    assert measured["now"]["p50_itl_ms"] < 10 < 20 < plain["now"]["p50_itl_ms"]


def test_a_profile_that_cannot_time_the_proposal_leaves_the_datasheet_and_says_why() -> None:
    now, change = _change(tp=2)
    got = forecast(now, change, SIGNALS, _profile())
    assert "does not time TP1/TP2" in got["timing"]
    assert got["now"]["p50_itl_ms"] == forecast(now, change, SIGNALS)["now"]["p50_itl_ms"]
