"""controller/launch/placement.py: which node each process goes to, and every refusal naming its
field."""

from __future__ import annotations

import math

import pytest

from controller.launch.placement import Node, PlacementError, place, planned
from controller.spec.deployment import DeploymentSpec
from controller.spec.field_error import FieldError
from controller.spec.rules import check
from tests.controller.factories import cluster_nodes, gpu_pair, tiny_pair

HEAD = Node("h" * 56, "127.0.0.9", gpus=0, gpus_free=0, head=True)


def workers(*free: float, total: float = 2.0) -> list[Node]:
    return [
        Node(f"{i:x}" * 56, f"127.0.0.{i + 2}", gpus=total, gpus_free=f) for i, f in enumerate(free)
    ]


def spec_with(**group_placement) -> DeploymentSpec:
    return tiny_pair(
        groups=[
            {"name": "prefill", "role": "prefill", "count": 2, "placement": group_placement},
            {"name": "decode", "role": "decode", "count": 2, "placement": group_placement},
        ]
    )


def test_prefill_and_decode_land_apart_and_the_proxy_on_the_home_node():
    placed = place(gpu_pair(), [HEAD, *workers(2, 2)], home=HEAD)
    assert placed.nodes["proxy"] == HEAD
    assert placed.nodes["prefill-0"].address != placed.nodes["decode-0"].address
    assert {n.address for n in placed.nodes.values()} == {"127.0.0.9", "127.0.0.2", "127.0.0.3"}


def test_instances_spread_then_fill_and_the_free_gpus_count_down():
    placed = place(spec_with(gpus_per_instance=1), [HEAD, *workers(2, 2)], home=HEAD)
    per_node = [
        sum(n.address == a for k, n in placed.nodes.items() if k != "proxy")
        for a in ("127.0.0.2", "127.0.0.3")
    ]
    assert per_node == [2, 2]
    with pytest.raises(PlacementError) as err:
        place(spec_with(gpus_per_instance=1), [HEAD, *workers(2, 1)], home=HEAD)
    assert err.value.loc == ("groups", 1, "placement", "gpus_per_instance")
    assert "needs 1 free GPUs" in err.value.message and "127.0.0.3 has 0 free" in err.value.message


def test_a_group_that_fits_on_no_node_names_the_largest():
    with pytest.raises(PlacementError) as err:
        place(spec_with(gpus_per_instance=4), [HEAD, *workers(2, 2)], home=HEAD)
    assert err.value.loc == ("groups", 0, "placement", "gpus_per_instance")
    assert "fits on no node" in err.value.message and "has 2" in err.value.message


def test_a_node_that_does_not_exist_is_named_with_what_the_cluster_has():
    spec = spec_with(nodes=[{"address": "127.0.0.77"}])
    with pytest.raises(PlacementError) as err:
        place(spec, [HEAD, *workers(2, 2)], home=HEAD)
    assert err.value.loc == ("groups", 0, "placement", "nodes")
    assert "address 127.0.0.77" in err.value.message and "127.0.0.2" in err.value.message


def test_selectors_by_id_prefix_label_and_resource():
    nodes = cluster_nodes()
    by_label = place(spec_with(nodes=[{"labels": {"pool": "decode"}}]), nodes, home=nodes[0])
    assert {n.address for k, n in by_label.nodes.items() if k != "proxy"} == {"127.0.0.3"}
    by_resource = place(spec_with(nodes=[{"resources": {"rdma": 1}}]), nodes, home=nodes[0])
    assert {n.address for k, n in by_resource.nodes.items() if k != "proxy"} == {"127.0.0.4"}
    by_id = place(spec_with(nodes=[{"node_id": "bbbbbbbb"}]), nodes, home=nodes[0])
    assert {n.address for k, n in by_id.nodes.items() if k != "proxy"} == {"127.0.0.3"}


def test_running_processes_keep_their_node():
    nodes = [HEAD, *workers(2, 2)]
    first = place(gpu_pair(), nodes, home=HEAD)
    keep = {"decode-0": first.nodes["prefill-0"].id}  # wherever it runs now, it stays
    again = place(gpu_pair(), nodes, home=HEAD, keep=keep)
    assert again.nodes["decode-0"] == first.nodes["prefill-0"]


def test_dead_nodes_are_not_used():
    nodes = [HEAD, *workers(2, 2)]
    nodes[1] = Node(nodes[1].id, nodes[1].address, 2, 2, alive=False)
    placed = place(gpu_pair(), nodes, home=HEAD)
    assert {n.address for k, n in placed.nodes.items() if k != "proxy"} == {"127.0.0.3"}


def test_a_proxy_the_instances_cannot_reach_is_refused():
    routable = [Node("r" * 56, "10.0.0.5", gpus=2, gpus_free=2)]
    with pytest.raises(PlacementError) as err:
        place(gpu_pair(), [HEAD, *routable], home=HEAD)
    assert err.value.loc == ("proxy", "node")
    assert "cannot reach each other" in err.value.message
    assert place(gpu_pair(), [HEAD, *workers(2, 2)], home=HEAD)  # all loopback: fine


def test_a_proxy_selector_matching_nothing_is_refused():
    spec = tiny_pair(proxy={"node": {"address": "127.0.0.50"}})
    with pytest.raises(PlacementError) as err:
        place(spec, [HEAD, *workers(2, 2)], home=HEAD)
    assert err.value.loc == ("proxy", "node")


def test_multi_node_instances_are_refused_by_name_unless_the_backend_takes_them():
    spec = spec_with(gpus_per_instance=1, nodes_per_instance=2)
    with pytest.raises(PlacementError) as err:
        place(spec, [HEAD, *workers(8, 8, total=8)], home=HEAD)
    assert err.value.loc == ("groups", 0, "placement", "nodes_per_instance")
    assert "LeaderWorkerSet" in err.value.message


def test_gpu_ids_on_a_cluster_are_refused_ray_assigns_them():
    spec = tiny_pair(
        groups=[
            {"name": "prefill", "role": "prefill", "gpus": [0]},
            {"name": "decode", "role": "decode", "gpus": [1]},
        ]
    )
    with pytest.raises(PlacementError) as err:
        place(spec, [HEAD, *workers(2, 2)], home=HEAD)
    assert err.value.loc == ("groups", 0, "gpus")
    assert "gpus_per_instance" in err.value.message
    local = Node("local", "127.0.0.1", head=True)  # GPUs not counted: ids are the way
    assert place(spec, [local], home=local).nodes["decode-0"] == local


def test_gpus_asked_twice_and_empty_selectors_are_refused_by_the_spec_check():
    spec = tiny_pair(
        groups=[
            {
                "name": "prefill",
                "role": "prefill",
                "gpus": [0],
                "placement": {"gpus_per_instance": 1},
            },
            {"name": "decode", "role": "decode"},
        ]
    )
    with pytest.raises(FieldError) as err:
        check(spec)
    assert err.value.loc == ("groups", 0, "placement", "gpus_per_instance")
    with pytest.raises(FieldError) as err:
        check(spec_with(nodes=[{}]))
    assert err.value.loc == ("groups", 0, "placement", "nodes", 0)


def test_planned_gpus_follow_placement_then_ids_then_none():
    assert [p.gpus for p in planned(gpu_pair())] == [1, 1]
    assert [p.gpus for p in planned(tiny_pair())] == [0, 0]
    assert math.isinf(Node("local", "127.0.0.1").gpus)
