"""Placing a layout's engines on nodes, and the link each prefill->decode pair then takes:
pure, no runs."""

from __future__ import annotations

import pytest

from domain import profiles
from simulator.model.handoff_paths import P2P, RDMA
from simulator.plan.errors import PlanError
from simulator.plan.nodes.links import Fabric, describe, pair_links, used_pairs
from simulator.plan.nodes.placement import Nodes, NodesError, Placement, place, resolve_nodes

H100 = profiles.hardware("h100")


def test_a_layout_that_fits_one_node_packs_into_it():
    placed = place("1P+1D", Nodes(2, 8), [4], [4])
    assert placed == Placement((0,), (0,)) and placed.nodes_used == 1


def test_packing_fills_nodes_largest_tp_first_prefills_before_decodes():
    placed = place("3P-TP2+2D-TP4", Nodes(2, 8), [2, 2, 2], [4, 4])
    assert placed.decodes == (0, 0) and placed.prefills == (1, 1, 1)
    placed = place("2P-TP4+2D-TP4", Nodes(2, 8), [4, 4], [4, 4])
    assert placed.prefills == (0, 0) and placed.decodes == (1, 1)
    assert placed.describe() == "P0,P1 on node 0; D0,D1 on node 1"


def test_split_keeps_prefills_and_decodes_apart_even_when_one_node_would_do():
    placed = place("1P+1D", Nodes(2, 8, "split"), [4], [4])
    assert placed == Placement((0,), (1,)) and not placed.same_node(0, 0)


def test_split_on_one_node_is_refused_naming_the_flag():
    with pytest.raises(PlanError, match="--placement split"):
        place("1P+1D", Nodes(1, 8, "split"), [4], [4])


def test_a_tp_group_never_spans_nodes():
    with pytest.raises(PlanError, match=r"--gpus-per-node 4: .*TP8.*never spans nodes"):
        place("1xTP8", Nodes(2, 4), colocated_tps=[8])


def test_a_layout_the_nodes_cannot_hold_is_refused_naming_the_flag():
    # 12 GPUs on 2 nodes of 6, but three TP4 groups strand 2 GPUs per node.
    with pytest.raises(PlanError, match="--nodes 2: 3xTP4 does not fit"):
        place("3xTP4", Nodes(2, 6), colocated_tps=[4, 4, 4])


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ((None, None, None), (8, 1, None)),  # today's plan: one node of 8
        ((4, None, None), (4, 1, None)),
        ((16, None, None), (16, 2, 8)),  # more than a node: nodes of the profile's size
        ((None, 2, None), (16, 2, 8)),  # nodes without a budget: all their GPUs
        ((None, 3, 4), (12, 3, 4)),
        ((8, 2, None), (8, 2, 8)),  # a budget below the nodes' GPUs
    ],
)
def test_nodes_and_budget_resolve_from_what_was_given(given, expected):
    assert resolve_nodes(*given, 8, 8) == expected


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ((None, 0, None), "nodes"),
        ((None, 2, 0), "gpus_per_node"),
        ((0, None, None), "gpus"),
        ((16, 1, None), "gpus"),  # more than 1 x 8
        ((None, 65, None), "nodes"),
    ],
)
def test_inconsistent_nodes_name_the_field(given, field):
    with pytest.raises(NodesError) as caught:
        resolve_nodes(*given, 8, 8)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"--{field.replace('_', '-')} ")


def test_nixl_pairs_take_nvlink_inside_a_node_and_the_nics_between_nodes():
    fabric = Fabric(H100, "NixlConnector", nics_per_node=8)
    links = pair_links(fabric, Placement((0, 1), (0, 1)), ranks=2)
    assert links[0][0].path is P2P and links[0][0].bandwidth_bytes_s == 2 * 450e9
    assert links[0][1].path is RDMA and links[0][1].bandwidth_bytes_s == 2 * 400e9 / 8
    assert describe(links, Placement((0, 1), (0, 1))) == [
        {"link": "in-node", "path": "p2p", "gbps": 900.0, "pairs": ["P0->D0", "P1->D1"]}
    ]


def test_ranks_share_the_nodes_nics_when_it_has_fewer_than_gpus():
    fabric = Fabric(H100, "NixlConnector", nics_per_node=2)
    across = fabric.link(same_node=False, ranks=4)
    assert across.path is RDMA and across.bandwidth_bytes_s == 2 * 400e9 / 8
    assert fabric.link(same_node=True, ranks=4).bandwidth_bytes_s == 4 * 450e9  # NVLink


def test_a_given_link_bandwidth_holds_for_every_pair():
    fabric = Fabric(H100, "NixlConnector", 8, link_gbps=7.0)
    assert {fabric.link(s, 4).bandwidth_bytes_s for s in (True, False)} == {7e9}


def test_the_proxy_uses_the_pairs_round_robin_reaches():
    assert used_pairs(2, 2) == [(0, 0), (1, 1)]
    assert used_pairs(3, 2) == [(0, 0), (1, 1), (2, 0), (0, 1), (1, 0), (2, 1)]
