"""The demo deployments of services/demo/deployments.py: the cluster one (`make run-cluster`) is a
valid spec
whose prefill and decode land on different nodes of the demo cluster harness/run_cluster.py
starts (pure: controller/placement.place over fake nodes shaped like that cluster's)."""

from __future__ import annotations

import pytest

from controller.launch.placement import Node, PlacementError, place
from controller.spec.rules import check
from harness.run_cluster import plan_from
from services.demo.deployments import DEMO_NAME, cluster_demo_spec


def demo_cluster_nodes() -> list[Node]:
    """The nodes `make run-cluster` starts: a head without GPUs, and its workers as declared."""
    plan = plan_from({})
    head = Node("aa" * 28, plan.head, gpus=0, gpus_free=0, head=True)
    return [head] + [
        Node(f"{i:02x}" * 28, w.address, gpus=w.gpus, gpus_free=w.gpus, resources=w.resources)
        for i, w in enumerate(plan.workers, 1)
    ]


def test_cluster_demo_spec_validates():
    spec = cluster_demo_spec()
    check(spec)
    assert spec.name == DEMO_NAME and spec.connector == "MoRIIOConnector"


def test_cluster_demo_puts_prefill_and_decode_on_different_workers():
    head, first, second = demo_cluster_nodes()
    placed = place(cluster_demo_spec(), [head, first, second], home=head).nodes
    assert placed["proxy"] == head
    assert placed["prefill-0"] == first and placed["decode-0"] == second


def test_cluster_demo_placement_holds_in_any_node_order():
    head, first, second = demo_cluster_nodes()
    placed = place(cluster_demo_spec(), [second, head, first], home=head).nodes
    assert (placed["prefill-0"], placed["decode-0"]) == (first, second)


def test_cluster_demo_needs_the_worker_that_advertises_its_resource():
    head, first, _ = demo_cluster_nodes()
    with pytest.raises(PlacementError) as err:
        place(cluster_demo_spec(), [head, first], home=head)
    assert err.value.loc == ("groups", 1, "placement", "nodes")
