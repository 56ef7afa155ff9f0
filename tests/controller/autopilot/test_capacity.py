"""The capacity model of a deployment's roles (controller/autopilot/capacity.py): the busy seconds
a request costs one prefill and one decode instance, from the stand-in's timing model, on the
wall clock."""

from __future__ import annotations

import pytest

from controller.autopilot.capacity import UNTIMED_MAX_NUM_SEQS, capacity_of
from controller.autopilot.decide import instance_slots
from controller.spec.deployment import DeploymentSpec
from domain import profiles
from harness.sim_specs import qwen3_2p2d
from simulator.model.timing import TimingModel
from tests.specs import nixl_1p1d


def spec(**changes) -> DeploymentSpec:
    return DeploymentSpec.model_validate(qwen3_2p2d(**changes))


def timing(tp: int = 4) -> TimingModel:
    return TimingModel(profiles.model("qwen3-235b-a22b-fp8"), profiles.hardware("mi300x"), tp)


def test_a_long_prompt_costs_its_chunks_one_after_another_slowed_by_the_time_scale():
    cap, why = capacity_of(spec())
    assert why == "" and "qwen3-235b-a22b-fp8 on mi300x, stand-in x 8" in cap.source
    assert cap.prefill_seconds(6000) == pytest.approx(timing().prefill_seconds(6000, 4096) * 8)


def test_short_prompts_share_a_chunk_so_each_costs_less_than_alone():
    cap, _ = capacity_of(spec())
    alone = timing().prefill_seconds(128, 4096) * 8
    assert cap.prefill_seconds(128) < alone / 3  # 16 at once (max_num_seqs), not 32
    assert cap.prefill_seconds(128) < cap.prefill_seconds(1024) / 4


def test_a_decode_serves_more_answers_with_more_sequences_and_longer_answers_cost_more():
    narrow, _ = capacity_of(spec())
    wide_groups = [
        {"name": "prefill", "role": "prefill", "count": 2, "tp": 4},
        {"name": "decode", "role": "decode", "count": 2, "tp": 4, "max_num_seqs": 64},
    ]
    wide, _ = capacity_of(spec(groups=wide_groups))
    assert wide.decode_seconds(128, 128) < narrow.decode_seconds(128, 128) / 2
    assert narrow.decode_seconds(128, 256) > 1.9 * narrow.decode_seconds(128, 128)


def test_the_kv_pool_bounds_the_sequences_a_decode_runs_at_once():
    cap, _ = capacity_of(
        spec(
            groups=[
                {"name": "prefill", "role": "prefill", "count": 1, "tp": 4},
                {"name": "decode", "role": "decode", "count": 1, "tp": 4, "max_num_seqs": 1024},
            ]
        )
    )
    pool = cap.kv_pool_tokens[4]
    # prompts so long that fewer than 1024 fit: each answer holds a larger share of the decode
    long_prompt = pool // 100
    per_answer = cap.decode_seconds(long_prompt, 10)
    step = timing().decode_step_seconds(100, 100 * (long_prompt + 5)) * 8
    assert per_answer == pytest.approx(10 * step / 100, rel=0.02)


def test_real_vllm_is_modelled_on_its_named_hardware_at_its_own_speed():
    cap, _ = capacity_of(spec(engine="vllm", time_scale=1.0))
    slowed, _ = capacity_of(spec())
    assert cap.prefill_seconds(6000) == pytest.approx(slowed.prefill_seconds(6000) / 8)
    assert "stand-in" not in cap.source


@pytest.mark.parametrize(
    "changes,why",
    [
        ({"model": "acme/unknown-70b"}, "no model profile"),
        ({"engine": "vllm", "hardware": None}, "names no hardware"),
    ],
)
def test_no_capacity_model_says_why(changes, why):
    cap, said = capacity_of(spec(**changes))
    assert cap is None and why in said


def test_each_instance_runs_its_flag_s_sequences_else_vllm_s_default_on_its_hardware():
    unset = [
        {"name": "prefill", "role": "prefill", "count": 1, "tp": 4},
        {"name": "decode", "role": "decode", "count": 2, "tp": 4, "max_num_seqs": 16},
    ]
    assert instance_slots(spec(groups=unset)) == {"prefill-0": 1024, "decode-0": 16, "decode-1": 16}
    tiny = DeploymentSpec.model_validate(nixl_1p1d())  # the tiny model plays a CPU: 128
    assert set(instance_slots(tiny).values()) == {128}
    untimed = spec(engine="vllm", hardware=None, groups=unset)
    assert instance_slots(untimed)["prefill-0"] == UNTIMED_MAX_NUM_SEQS == 256
