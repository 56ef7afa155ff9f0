"""The steps of a read/write switch for each strategy, and what refuses one: pure."""

import pytest

from controller.spec.deployment import Mode
from controller.switch.plan import (
    StepKind,
    SwitchRejected,
    modes,
    plan,
    recovery,
    target_spec,
    with_modes,
)
from controller.switch.steps import HANDLERS
from tests.controller.factories import moriio_pairs, tiny_pair

K = StepKind


def kinds(steps):
    return [s.kind for s in steps]


def test_hold_pauses_the_old_group_restarts_both_sides_then_releases():
    steps = plan(moriio_pairs(1, "read"), "write", "hold")
    assert kinds(steps) == [
        K.HOLD_BEGIN,
        K.PAUSE,
        K.WAIT_IDLE,
        K.APPLY,
        K.WAIT_READY,
        K.HOLD_END,
        K.RESUME,
    ]
    assert steps[1].mode == "read" and steps[-1].mode == "read"  # the old group is held
    assert steps[3].instances == ("prefill-0", "decode-0")
    assert {g.mode.value for g in steps[3].spec.groups} == {"write"}
    assert steps[4].mode == "write"


def test_keep_serving_restarts_one_side_while_the_other_serves_whole_requests():
    steps = plan(moriio_pairs(1, "write"), "read", "keep-serving")
    assert [s.describe() for s in steps] == [
        "degrade_begin",
        "whole_on decode-0",
        "drain prefill-0",
        "wait_idle prefill-0",
        "apply prefill-0",
        "wait_ready prefill-0",
        "undrain prefill-0",
        "whole_on prefill-0",
        "drain decode-0",
        "wait_idle decode-0",
        "apply decode-0",
        "wait_ready decode-0",
        "undrain decode-0",
        "whole_off prefill-0, decode-0",
        "degrade_end",
    ]
    half, full = steps[4].spec, steps[10].spec
    assert {g.name: g.mode.value for g in half.groups} == {"prefill": "read", "decode": "write"}
    assert {g.mode.value for g in full.groups} == {"read"}


def test_roll_moves_one_pair_at_a_time_and_holds_nothing():
    steps = plan(moriio_pairs(2, "read"), "write", "roll")
    batch = [K.DRAIN, K.WAIT_IDLE, K.APPLY, K.WAIT_READY, K.UNDRAIN]
    assert kinds(steps) == batch + batch
    assert steps[0].instances == ("prefill-0-0", "decode-0-0")
    assert steps[5].instances == ("prefill-1-0", "decode-1-0")
    # Each batch converges to the whole target; `instances` says which processes it touches.
    assert steps[2].instances == ("prefill-0-0", "decode-0-0")
    assert {g.mode.value for g in steps[2].spec.groups} == {"write"}
    assert steps[3].mode == "write"
    assert K.PAUSE not in kinds(steps) and K.HOLD_BEGIN not in kinds(steps)


def test_roll_moves_instance_pairs_of_one_group_with_count_two_per_role():
    steps = plan(moriio_pairs(1, "read", count=2), "write", "roll")
    applies = [s for s in steps if s.kind is K.APPLY]
    assert [s.instances for s in applies] == [("prefill-0", "decode-0"), ("prefill-1", "decode-1")]
    assert [s.describe() for s in steps[:5]] == [
        "drain prefill-0, decode-0",
        "wait_idle prefill-0, decode-0",
        "apply prefill-0, decode-0",
        "wait_ready prefill-0, decode-0",
        "undrain prefill-0, decode-0",
    ]


def test_roll_restarts_the_extra_instances_of_the_larger_role_one_at_a_time():
    spec = moriio_pairs(1, "read", count=2)
    groups = [g.model_copy(update={"count": 3}) if g.name == "decode" else g for g in spec.groups]
    steps = plan(spec.model_copy(update={"groups": groups}), "write", "roll")
    applies = [s.instances for s in steps if s.kind is K.APPLY]
    assert applies == [("prefill-0", "decode-0"), ("prefill-1", "decode-1"), ("decode-2",)]


def test_the_target_is_the_last_apply():
    spec = moriio_pairs(2, "read")
    steps = plan(spec, "write", "roll")
    assert {g.mode.value for g in target_spec(spec, steps).groups} == {"write"}
    assert target_spec(spec, []) is spec


@pytest.mark.parametrize(
    ("spec", "target", "strategy", "says"),
    [
        (moriio_pairs(1), "write", "roll", "has 1 prefill and 1 decode instance.*use hold"),
        (moriio_pairs(2), "write", "hold", "use roll"),
        (moriio_pairs(1), "read", "hold", "already runs in read"),
        (moriio_pairs(1), "sideways", "hold", "read or write"),
        (moriio_pairs(1), "write", "teleport", "strategy must be one of"),
        (tiny_pair(), "write", "hold", "only MoRIIOConnector"),
    ],
)
def test_a_switch_that_cannot_be_done_is_refused_saying_why(spec, target, strategy, says):
    with pytest.raises(SwitchRejected, match=says):
        plan(spec, target, strategy)


def test_every_step_kind_has_one_handler():
    assert set(HANDLERS) == set(StepKind)


def test_step_kinds_keep_their_wire_words():
    assert [k.value for k in StepKind][:3] == ["drain", "undrain", "whole_on"]
    assert plan(moriio_pairs(1), "write", "hold")[1].describe() == "pause read"


def test_recovery_puts_routing_back_then_waits_for_the_target_when_it_runs():
    target = moriio_pairs(1, "write")
    steps = recovery(target, target, None)
    assert [s.describe() for s in steps] == [
        "resume read",
        "resume write",
        "whole_off prefill-0, decode-0",
        "undrain prefill-0, decode-0",
        "wait_ready prefill-0, decode-0",
    ]
    assert steps[-1].mode == "write"


def test_recovery_of_a_half_done_switch_needs_its_strategy_to_restart_anything():
    half = with_modes(moriio_pairs(1, "read"), {"prefill"}, Mode.WRITE)
    assert modes(half) == {"prefill": "write", "decode": "read"}
    with pytest.raises(SwitchRejected, match="no strategy"):
        recovery(half, moriio_pairs(1, "write"), None)
    steps = recovery(half, moriio_pairs(1, "write"), "keep-serving")
    assert kinds(steps)[:4] == [K.RESUME, K.RESUME, K.WHOLE_OFF, K.UNDRAIN]
    assert {g.mode.value for g in target_spec(half, steps).groups} == {"write"}
