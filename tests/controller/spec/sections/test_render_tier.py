"""A deployment's render group (controller/spec/sections/render_tier.py): every broken rule is
refused at
its field, and a render group beside engines passes in both topologies."""

from __future__ import annotations

import pytest

from controller.spec.field_error import FieldError
from controller.spec.rules import check
from tests.specs import colocated, edited, moriio_1p1d, nixl_1p1d, spec

RENDER = {"name": "render", "role": "render"}


def with_render(body: dict, **group: object) -> dict:
    return {**body, "groups": [*body["groups"], {**RENDER, **group}]}


BROKEN = {
    "two render groups": (
        {**nixl_1p1d(), "groups": [*nixl_1p1d()["groups"], RENDER, {**RENDER, "name": "r2"}]},
        ("groups", 3, "role"),
        "at most one render group",
    ),
    "alone": (
        nixl_1p1d(groups=[RENDER]),
        ("groups",),
        "alone serves nothing",
    ),
    "tp": (with_render(nixl_1p1d(), tp=2), ("groups", 2, "tp"), "no tensor parallelism"),
    "gpus": (with_render(nixl_1p1d(), gpus=[0]), ("groups", 2, "gpus"), "needs no GPU"),
    "mode": (
        with_render(moriio_1p1d(), mode="read"),
        ("groups", 2, "mode"),
        "no read/write mode",
    ),
    "kv config": (
        with_render(nixl_1p1d(), kv_connector_extra_config={"backends": ["UCX"]}),
        ("groups", 2, "kv_connector_extra_config"),
        "no connector",
    ),
    "max_num_seqs": (
        with_render(nixl_1p1d(), max_num_seqs=8),
        ("groups", 2, "max_num_seqs"),
        "no sequences",
    ),
    "max_num_batched_tokens": (
        with_render(nixl_1p1d(), max_num_batched_tokens=512),
        ("groups", 2, "max_num_batched_tokens"),
        "batches no tokens",
    ),
    "a KV port": (
        with_render(nixl_1p1d(), ports=[{"http": 9100, "side_channel": 9200}]),
        ("groups", 2, "ports", 0, "side_channel"),
        "no side_channel port",
    ),
    "a moved render instance": (
        with_render(nixl_1p1d(role_switch={"serving": {"render-0": "decode"}})),
        ("role_switch", "serving", "render-0"),
        "render instance",
    ),
}


@pytest.mark.parametrize(("body", "loc", "phrase"), BROKEN.values(), ids=BROKEN.keys())
def test_each_broken_rule_is_refused_at_its_field(body: dict, loc: tuple, phrase: str) -> None:
    with pytest.raises(FieldError) as err:
        check(spec(body))
    assert err.value.loc == loc
    assert phrase in err.value.message


@pytest.mark.parametrize(
    "body",
    [nixl_1p1d(), moriio_1p1d(), colocated()],
    ids=["nixl", "moriio", "colocated"],
)
def test_one_render_group_beside_engines_is_fine(body: dict) -> None:
    check(spec(with_render(body, count=2, ports=[{"http": 9100}, {"http": 9101}])))


def test_a_render_group_does_not_count_as_the_missing_decode() -> None:
    body = edited(with_render(nixl_1p1d()), ("groups",), [nixl_1p1d()["groups"][0], RENDER])
    with pytest.raises(FieldError) as err:
        check(spec(body))
    assert err.value.loc == ("groups",)
    assert "one prefill group and one decode group" in err.value.message


def test_a_mode_switch_leaves_the_render_group_alone() -> None:
    from controller.switch.plan import plan, target_spec

    s = spec(with_render(moriio_1p1d(mode="write")))
    steps = plan(s, "read", "hold")
    target = target_spec(s, steps)
    check(target)
    assert [g.mode for g in target.groups][2] is None
    assert all("render-0" not in step.instances for step in steps)


def test_the_autopilot_counts_no_render_instance_as_movable() -> None:
    body = with_render(nixl_1p1d(role_switch={}, autopilot={"min_per_role": 1}), count=3)
    with pytest.raises(FieldError) as err:
        check(spec(body))
    assert err.value.loc == ("autopilot", "min_per_role")
