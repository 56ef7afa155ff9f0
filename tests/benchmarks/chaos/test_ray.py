"""The pure part of the chaos row "a Ray node removed" (benchmarks/chaos/ray.py): the spec it
deploys spreads a 2P2D over three workers with no node holding two instances of one role, the
node it removes is the busiest, what moved is said, and its cluster is apart from the others."""

from __future__ import annotations

from benchmarks import bench_cluster
from benchmarks.chaos import ray as chaos_ray
from controller.launch.placement import Node, place
from controller.spec.deployment import DeploymentSpec
from harness.ray_cluster import GCS_PORT, HEAD_ADDRESS, PORT_BASE, _ports

HEAD = Node("h" * 56, chaos_ray.HEAD, gpus=0, gpus_free=0, head=True)


def workers() -> list[Node]:
    return [Node(str(i) * 56, a, gpus=2, gpus_free=2) for i, a in enumerate(chaos_ray.WORKERS)]


def units_of(placed) -> dict[str, dict]:
    return {n: {"address": node.address, "state": "RUNNING"} for n, node in placed.nodes.items()}


def test_the_spec_spreads_each_role_over_two_nodes():
    placed = place(DeploymentSpec.model_validate(chaos_ray.spec()), [HEAD, *workers()], home=HEAD)
    units = units_of(placed)
    assert units["proxy"]["address"] == chaos_ray.HEAD
    assert chaos_ray.doubled(units) == []
    assert {u["address"] for n, u in units.items() if n != "proxy"} == set(chaos_ray.WORKERS)


def test_the_busiest_worker_is_removed_and_holds_one_of_each_role():
    placed = place(DeploymentSpec.model_validate(chaos_ray.spec()), [HEAD, *workers()], home=HEAD)
    units = units_of(placed)
    victim = chaos_ray.node_to_remove(units)
    assert sorted(chaos_ray.role_of(n) for n in chaos_ray.on_node(units, victim)) == [
        "decode",
        "prefill",
    ]


def test_a_node_with_two_of_one_role_is_named():
    units = {
        "prefill-0": {"address": "127.0.0.31"},
        "prefill-1": {"address": "127.0.0.31"},
        "decode-0": {"address": "127.0.0.32"},
        "proxy": {"address": "127.0.0.34"},
    }
    assert chaos_ray.doubled(units) == ["127.0.0.31 holds 2 prefills"]


def test_ties_go_to_the_lowest_address_numerically():
    units = {"decode-0": {"address": "127.0.0.9"}, "decode-1": {"address": "127.0.0.10"}}
    assert chaos_ray.node_to_remove(units) == "127.0.0.9"


def test_moves_say_where_each_instance_went_and_only_off_the_lost_node():
    before = {
        "prefill-0": {"address": "127.0.0.31"},
        "decode-0": {"address": "127.0.0.32"},
        "proxy": {"address": "127.0.0.31"},  # not an instance
    }
    after = {
        "prefill-0": {"address": "127.0.0.33", "state": "RUNNING"},
        "decode-0": {"address": "127.0.0.32", "state": "RUNNING"},
    }
    assert chaos_ray.moves(before, after, "127.0.0.31") == ["prefill-0 127.0.0.31 -> 127.0.0.33"]
    assert chaos_ray.moved(after, ["prefill-0"], "127.0.0.31")


def test_an_instance_still_on_the_lost_node_or_nowhere_has_not_moved():
    lost = "127.0.0.31"
    assert not chaos_ray.moved({"p": {"address": lost, "state": "RUNNING"}}, ["p"], lost)
    assert not chaos_ray.moved({"p": {"address": None, "state": "RUNNING"}}, ["p"], lost)
    assert not chaos_ray.moved({"p": {"address": "127.0.0.32", "state": "STARTING"}}, ["p"], lost)


def ports_of(gcs_port: int, port_base: int, nodes: int, stride: int = 1000) -> set[int]:
    """Every port a local cluster of `nodes` nodes listens on (harness/ray_cluster.py)."""
    found = {gcs_port}
    for index in range(nodes):
        flags = dict(f.split("=", 1) for f in _ports(port_base, index, stride))
        found |= set(range(int(flags["--node-manager-port"]), int(flags["--max-worker-port"]) + 1))
    return found


def test_the_rows_cluster_is_apart_from_every_other_local_cluster():
    plan = chaos_ray.PLAN
    ours = ports_of(plan.gcs_port, plan.port_base, len(plan.addresses), plan.port_stride)
    # tests/ray and make run-cluster (4 nodes, a 5th after its restore), tests/vllm/test_ray.py
    # (3 nodes; its module skips without Ray, so its figures are copied), make bench-cluster.
    others = {
        (HEAD_ADDRESS, "127.0.0.2", "127.0.0.3", "127.0.0.5"): ports_of(GCS_PORT, PORT_BASE, 5),
        ("127.0.0.12", "127.0.0.13", "127.0.0.14"): ports_of(51379, 52000, 3),
        (bench_cluster.HEAD, *bench_cluster.WORKERS): ports_of(
            bench_cluster.GCS_PORT, bench_cluster.PORT_BASE, 5
        ),
    }
    for addresses, ports in others.items():
        assert not set(plan.addresses) & set(addresses)
        assert not ours & ports
    assert max(ours) <= 65535 and min(ours) >= 61000  # above the ephemeral range


def test_a_node_takes_a_block_of_its_stride():
    flags = dict(f.split("=", 1) for f in _ports(62000, 2, 800))
    assert flags["--node-manager-port"] == "63600"
    assert flags["--max-worker-port"] == "64399"


def test_a_cluster_that_cannot_start_is_skipped_with_the_last_line_of_why():
    failed = RuntimeError(
        "ray start (127.0.0.31) failed:\n\nTraceback (most recent call last):\n"
        '  File "node.py", line 440\nException: The current node timed out during startup.\n'
    )
    assert chaos_ray.last_line(failed) == "Exception: The current node timed out during startup."
    assert chaos_ray.last_line(TimeoutError()) == "TimeoutError"
