"""Which processes belong to a Ray node: the node's address exactly, never one it prefixes
(stopping 127.0.0.2 must not touch a cluster on 127.0.0.21)."""

from __future__ import annotations

from harness.owned_cluster import ClusterPlan, Worker
from harness.ray_cluster import names_node


def test_a_node_is_named_by_its_exact_address():
    raylet = ["raylet", "--node_ip_address=127.0.0.21", "--node_manager_port=57000"]
    assert names_node(raylet, "127.0.0.21")
    assert not names_node(raylet, "127.0.0.2")


def test_the_address_may_follow_the_flag_as_its_own_argument():
    start = ["ray", "start", "--node-ip-address", "127.0.0.3", "--head"]
    assert names_node(start, "127.0.0.3")
    assert not names_node(start, "127.0.0.31")
    assert not names_node(["ray", "start", "--node-ip-address"], "127.0.0.3")


def test_a_plan_lists_the_head_first():
    plan = ClusterPlan([Worker("127.0.0.21", 8), Worker("127.0.0.22", 8)], head="127.0.0.24")
    assert plan.addresses == ["127.0.0.24", "127.0.0.21", "127.0.0.22"]
