"""Each verdict that recommends a change gets one that this deployment can run: a spec that
passes every check, carried out the right way, watching the signal its rule is about; and
none where the change cannot be drawn (pinned GPUs that do not split, already on)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.proposals import PROPOSERS, propose
from controller.spec.deployment import DeploymentSpec
from controller.spec.rules import check
from controller.spec.sections.role_switch import instance_roles
from domain.modes import Role
from tests.controller.factories import mori_blog


def spec(**changes: Any) -> DeploymentSpec:
    base = {
        "name": "d",
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [
            {"name": "prefill", "role": "prefill", "count": 2},
            {"name": "decode", "role": "decode", "count": 2},
        ],
    }
    return DeploymentSpec.model_validate({**base, **changes})


def colocated(count: int = 2, **group: Any) -> DeploymentSpec:
    return spec(
        topology="colocated",
        connector=None,
        groups=[{"name": "c", "role": "colocated", "count": count, **group}],
    )


def roles(s: DeploymentSpec) -> list[str]:
    return sorted(r.value for r in instance_roles(s).values())


def test_interference_disaggregates_a_colocated_deployment_on_the_same_gpus():
    change = propose(colocated(4, tp=2, gpus=list(range(8))), "itl_interference")
    assert change is not None and change.how == "revision"
    check(change.spec)
    assert change.spec.connector == "NixlConnector"
    assert roles(change.spec) == ["decode", "decode", "prefill", "prefill"]
    assert [g.gpus for g in change.spec.groups] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert (change.watch, change.direction) == ("itl_p99_ms", "down")
    assert propose(spec(), "itl_interference") is None  # already disaggregated


def test_one_colocated_instance_becomes_one_prefill_and_one_decode():
    change = propose(colocated(1), "itl_interference")
    check(change.spec)
    assert roles(change.spec) == ["decode", "prefill"]


def test_pinned_gpus_that_do_not_cover_both_roles_propose_nothing():
    assert propose(colocated(1, gpus=[3]), "itl_interference") is None


def test_ttft_bound_moves_a_decode_to_prefill_by_role_switch_when_it_is_on():
    change = propose(spec(role_switch={}), "ttft_binding")
    assert change.how == "role_move" and (change.instance, change.role) == ("decode-1", "prefill")
    check(change.spec)
    assert roles(change.spec) == ["decode", "prefill", "prefill", "prefill"]
    assert (change.watch, change.direction) == ("ttft_p99_ms", "down")


def test_ttft_bound_without_role_switch_is_a_revision_with_one_instance_regrouped():
    change = propose(spec(), "ttft_binding")
    assert change.how == "revision"
    check(change.spec)
    assert [(g.role.value, g.count) for g in change.spec.groups] == [
        ("prefill", 3),
        ("decode", 1),
    ]


def test_regrouping_moves_gpu_ids_along_and_drops_an_emptied_group():
    s = spec(
        groups=[
            {"name": "p", "role": "prefill", "count": 1, "tp": 2, "gpus": [0, 1]},
            {"name": "d", "role": "decode", "count": 1, "tp": 2, "gpus": [2, 3]},
            {"name": "d2", "role": "decode", "count": 1, "tp": 2, "gpus": [4, 5]},
        ]
    )
    change = propose(s, "ttft_binding")
    check(change.spec)
    assert [(g.name, g.count, g.gpus) for g in change.spec.groups] == [
        ("p", 2, [0, 1, 4, 5]),
        ("d", 1, [2, 3]),
    ]


def test_ttft_bound_with_one_decode_widens_the_prefills_tp_unless_gpus_are_pinned():
    one_each = spec(
        groups=[
            {"name": "prefill", "role": "prefill"},
            {"name": "decode", "role": "decode"},
        ]
    )
    change = propose(one_each, "ttft_binding")
    check(change.spec)
    assert [(g.role.value, g.tp) for g in change.spec.groups] == [("prefill", 2), ("decode", 1)]
    assert propose(mori_blog(), "ttft_binding") is None  # 1P1D on pinned GPUs


def test_colocated_ttft_bound_widens_its_tp():
    change = propose(colocated(2), "ttft_binding")
    check(change.spec)
    assert change.spec.groups[0].tp == 2


def test_itl_bound_moves_a_prefill_to_decode_and_never_the_last_one():
    change = propose(spec(role_switch={}), "itl_binding")
    assert (change.instance, change.role) == ("prefill-1", "decode")
    check(change.spec)
    assert (change.watch, change.direction) == ("itl_p99_ms", "down")
    lone = spec(groups=[{"name": "p", "role": "prefill"}, {"name": "d", "role": "decode"}])
    assert propose(lone, "itl_binding") is None
    assert propose(colocated(), "itl_binding") is None


def test_multi_turn_turns_on_bidirectional_kv_for_nixl_only():
    change = propose(spec(), "multi_turn")
    check(change.spec)
    assert change.spec.kv_connector_extra_config["bidirectional_kv_xfer"] is True
    assert (change.watch, change.direction) == ("prompt_saved_share", "up")
    assert propose(change.spec, "multi_turn") is None  # already on
    assert propose(mori_blog(), "multi_turn") is None  # MoRIIO has no such feature
    off = spec(kv_connector_extra_config={"bidirectional_kv_xfer": False})
    assert propose(off, "multi_turn").spec.kv_connector_extra_config["bidirectional_kv_xfer"]


def test_multi_turn_on_a_colocated_deployment_disaggregates_with_bidirectional_kv():
    change = propose(colocated(2), "multi_turn")
    check(change.spec)
    assert change.spec.kv_connector_extra_config == {"bidirectional_kv_xfer": True}


def test_slow_transfer_switches_moriio_read_to_write_and_colocates_otherwise():
    change = propose(mori_blog("read"), "slow_kv_transfer")
    assert change.how == "switch" and change.mode == "write"
    check(change.spec)
    assert {g.mode.value for g in change.spec.groups} == {"write"}
    nixl = propose(spec(), "slow_kv_transfer")
    assert nixl.how == "revision" and nixl.spec.topology.value == "colocated"


def test_light_traffic_colocates_on_the_same_gpus():
    change = propose(mori_blog(), "light_traffic")
    check(change.spec)
    group = change.spec.groups[0]
    assert (group.role, group.count, group.tp, group.gpus) == (Role.COLOCATED, 2, 4, list(range(8)))
    assert change.spec.connector is None and change.spec.kv_connector_extra_config == {}
    assert propose(colocated(), "light_traffic") is None


@pytest.mark.parametrize("rule", ["pd_not_happening", "canary_failing", "prefix_cache_heavy"])
def test_diagnostic_verdicts_carry_no_change(rule):
    assert rule not in PROPOSERS and propose(spec(), rule) is None


def test_encode_groups_stay_as_they_are_when_the_topology_changes():
    from tests.specs import epd_1e1p1d

    epd = DeploymentSpec.model_validate(epd_1e1p1d())
    colocated_epd = propose(epd, "light_traffic")
    check(colocated_epd.spec)
    assert [g.role.value for g in colocated_epd.spec.groups] == ["encode", "colocated"]
    assert colocated_epd.spec.groups[1].count == 2  # the prefill and the decode
    back = propose(colocated_epd.spec, "itl_interference")
    check(back.spec)
    assert [g.role.value for g in back.spec.groups] == ["encode", "prefill", "decode"]


def test_a_busy_frontend_gets_a_render_tier_one_instance_per_decode_without_evidence():
    change = propose(spec(), "frontend_cpu")
    check(change.spec)
    render = change.spec.groups[-1]
    assert (render.role, render.count, render.name) == (Role.RENDER, 2, "render")
    assert (change.watch, change.direction) == ("frontend_cpu_share", "down")
    assert "one per decode or colocated instance" in change.summary
    assert propose(change.spec, "frontend_cpu") is None  # one already
    colocated_tier = propose(colocated(3), "frontend_cpu")
    check(colocated_tier.spec)
    assert colocated_tier.spec.groups[-1].count == 3
    named = spec(groups=[{"name": "render", "role": "prefill"}, {"name": "d", "role": "decode"}])
    assert propose(named, "frontend_cpu").spec.groups[-1].name == "render-tier"


@pytest.mark.parametrize(
    ("groups", "busiest", "share", "count"),
    [
        # 1P1D: the decode's render load, 0.9 x 0.8 = 0.72 cores, over half a core each
        ([{"role": "prefill"}, {"role": "decode"}], 0.9, 0.8, 2),
        ([{"role": "prefill"}, {"role": "decode"}], 0.9, 0.5, 1),
        # two decodes: twice the load to take
        ([{"role": "prefill"}, {"role": "decode", "count": 2}], 0.9, 0.5, 2),
        ([{"role": "prefill", "count": 3}, {"role": "decode"}], 0.95, 0.3, 1),
        # a runaway figure is capped
        ([{"role": "prefill"}, {"role": "decode", "count": 40}], 1.0, 1.0, 16),
    ],
)
def test_a_render_tier_is_sized_from_the_evidence(groups, busiest, share, count):
    named = [{"name": f"g{i}", **g} for i, g in enumerate(groups)]
    evidence = {"frontend_cpu_share": busiest, "render_load_share": share}
    change = propose(spec(groups=named), "frontend_cpu", evidence)
    check(change.spec)
    assert change.spec.groups[-1].count == count
    assert f"{count} render instance(s) (sized to half a core each" in change.summary
