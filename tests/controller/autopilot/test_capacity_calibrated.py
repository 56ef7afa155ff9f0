"""The capacity model on a deployment's calibrated profile: its measured steps, on the wall
clock (no stand-in time scale over them), and the datasheet where the profile does not fit."""

from __future__ import annotations

import pytest

from controller.autopilot.capacity import capacity_of
from controller.spec.deployment import DeploymentSpec
from harness.sim_specs import qwen3_2p2d
from simulator.model.calibration.fit import StepCoefficients
from simulator.model.calibration.profile import CalibratedProfile

MODEL, HARDWARE = "qwen3-235b-a22b-fp8", "mi300x"
STEPS = StepCoefficients(base_s=0.03, decode_seq_s=0.0005, ctx_token_s=0.0, prefill_token_s=4e-5)


def spec() -> DeploymentSpec:
    return DeploymentSpec.model_validate(qwen3_2p2d())  # TP4 prefill and decode, x8 slower


def profile(**over) -> CalibratedProfile:
    return CalibratedProfile(
        **{"model": MODEL, "hardware": HARDWARE, "tp": 4, "steps": STEPS, **over}
    )


def test_measured_steps_set_the_busy_seconds_and_the_source_says_so() -> None:
    cap, why = capacity_of(spec(), profile(source="bench.json"))
    assert why == "" and cap.time_scale == 1.0
    assert cap.source.startswith("calibrated from bench.json")
    # a 6000-token prompt in chunks of 4096: two steps of base plus its tokens
    assert cap.prefill_seconds(6000) == pytest.approx(2 * 0.03 + 6000 * 4e-5)
    seqs = 16  # the spec's max_num_seqs
    assert cap.decode_seconds(1000, 100) == pytest.approx(100 * (0.03 + seqs * 0.0005) / seqs)


@pytest.mark.parametrize(
    ("over", "said"),
    [({"tp": 2}, "the calibration at TP2"), ({"hardware": "h100"}, "on h100")],
)
def test_a_profile_of_other_engines_leaves_the_datasheet_and_says_why(over, said) -> None:
    cap, why = capacity_of(spec(), profile(**over))
    plain, _ = capacity_of(spec())
    assert why == "" and cap.time_scale == 8
    assert said in cap.source and cap.prefill_seconds(6000) == plain.prefill_seconds(6000)
