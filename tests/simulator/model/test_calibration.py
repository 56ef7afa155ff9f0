"""The calibration's pure parts: steps read off request timelines, and the least squares."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.model.calibration.fit import (
    MIN_STEPS,
    FitError,
    StepCoefficients,
    fit_handoff,
    fit_steps,
)
from simulator.model.calibration.observations import (
    StepObservation,
    Timeline,
    step_observations,
    timelines,
)
from simulator.model.calibration.profile import ProfileError, from_json


def _observations(truth: StepCoefficients, count: int = 200) -> list[StepObservation]:
    out = []
    for i in range(count):
        seqs, prefill = 1 + i % 9, 1024 * (i % 7 == 0)
        ctx = seqs * (300 + 37 * (i % 5))
        out.append(StepObservation(truth.seconds(seqs, ctx, prefill), seqs, ctx, prefill))
    return out


def test_fit_recovers_the_coefficients_that_made_the_steps() -> None:
    truth = StepCoefficients(0.008, 0.0001, 4e-8, 1e-5)
    fitted = fit_steps(_observations(truth))
    for name in ("base_s", "decode_seq_s", "ctx_token_s", "prefill_token_s"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=1e-6)


def test_steps_a_busy_client_saw_late_do_not_move_the_fit() -> None:
    truth = StepCoefficients(0.008, 0.0001, 4e-8, 1e-5)
    observations = _observations(truth)
    late = [
        replace(o, seconds=o.seconds + 0.02) if i % 20 == 0 else o
        for i, o in enumerate(observations)
    ]
    assert fit_steps(late).base_s == pytest.approx(truth.base_s, rel=0.01)


def test_a_coefficient_the_data_makes_negative_is_held_at_zero() -> None:
    truth = StepCoefficients(0.008, 0.0, 0.0, 1e-5)
    observations = _observations(truth)
    # steps with more decodes ran a little faster: least squares would say each decode saves time
    skewed = [replace(o, seconds=o.seconds - 1e-5 * o.decode_seqs) for o in observations]
    fitted = fit_steps(skewed)
    assert fitted.decode_seq_s == 0.0 and fitted.ctx_token_s >= 0.0


def test_too_few_steps_or_no_prefill_among_them_is_refused() -> None:
    truth = StepCoefficients(0.008, 0.0001, 4e-8, 1e-5)
    with pytest.raises(FitError, match=f"need at least {MIN_STEPS}"):
        fit_steps(_observations(truth, MIN_STEPS - 1))
    no_prefill = [o for o in _observations(truth) if o.prefill_tokens == 0]
    with pytest.raises(FitError, match="had a prefill in them"):
        fit_steps(no_prefill)


def test_a_gap_is_the_step_of_everyone_decoding_and_the_prompts_that_landed_in_it() -> None:
    # a decodes alone, then b arrives; b's first token comes with a's third
    a = Timeline(0.0, 100, (0.010, 0.018, 0.031, 0.039))
    b = Timeline(0.019, 500, (0.0312, 0.0395))
    steps = step_observations([a, b], owners=[a])
    assert [s.decode_seqs for s in steps] == [1, 1, 2]
    assert [s.prefill_tokens for s in steps] == [0, 500, 0]
    assert steps[1].seconds == pytest.approx(0.013)
    assert steps[2].ctx_tokens == (100 + 3) + (500 + 1)
    assert step_observations([a, b], owners=[a], cached=True)[1].prefill_tokens == 0


def test_failed_requests_and_requests_without_tokens_are_not_timelines() -> None:
    records = [
        {
            "ok": True,
            "start": 1.0,
            "ttft": 0.5,
            "itl": [0.1, 0.1],
            "prompt_tokens": 8,
            "output_tokens": 3,
        },
        {"ok": False, "start": 1.0, "ttft": 0.0, "itl": [], "prompt_tokens": 8, "output_tokens": 0},
    ]
    (only,) = timelines(records)
    assert only.token_times == pytest.approx((1.5, 1.6, 1.7))


def test_handoff_is_setup_plus_per_token_from_the_transfers() -> None:
    fit = fit_handoff([(n, 0.001 + 2e-6 * n) for n in (500, 1000, 2000, 4000)], setup_s=0.0002)
    assert fit is not None
    assert fit.setup_s == pytest.approx(0.001) and fit.token_s == pytest.approx(2e-6)
    assert fit_handoff([(1000, 0.003)], 0.0002) is None


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"format": "other"}, "format"),
        ({"format": "pdctl-calibration/1", "hardware": "h100", "tp": 1, "steps": {}}, "model"),
        (
            {
                "format": "pdctl-calibration/1",
                "model": "m",
                "hardware": "h",
                "tp": 1,
                "steps": {"base_s": -1},
            },
            "steps.base_s",
        ),
    ],
)
def test_a_profile_file_that_is_not_one_names_the_field(data: dict, field: str) -> None:
    with pytest.raises(ProfileError, match=field):
        from_json(data)
