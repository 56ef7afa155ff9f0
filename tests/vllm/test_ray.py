"""Real vLLM on Ray: a NIXL 1 prefill + 1 decode pair of the CPU build placed by `pdctl serve
--ray-address` on two nodes of a real local Ray cluster (a head and two workers, each on its
own loopback address), each instance listening on its node's address only, NIXL's side channel
there too; a greedy completion through the proxy equals the colocated run's (conftest's
reference), the decode's transfer counters move, and the stop leaves no vLLM and, once the
cluster is stopped, no Ray process behind.

The cluster's addresses (127.0.0.12-14) and ports (GCS 51379, the rest 52000-54999) are its own,
apart from the clusters of tests/ray, which may run on this machine at the same time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.control_plane import ControlPlane
from harness.processes import metric_value
from harness.ray_cluster import LocalRayCluster
from tests.vllm import harness
from tests.vllm.conftest import client, deployed, greedy, vllm_env

pytest.importorskip("ray", reason="`make test-vllm` installs Ray (the dev extras)")

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

HEAD = "127.0.0.14"
PREFILL_NODE, DECODE_NODE = "127.0.0.12", "127.0.0.13"
GCS_PORT, PORT_BASE = 51379, 52000  # Ray's ports: 52000-54999, out of every test range
EXTERNAL = {"source": "external_kv_transfer"}
REQUEST = ("completion", 1)  # one of conftest's REFERENCE_REQUESTS


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, reference):
    """After the colocated reference has run (and stopped): one vLLM at a time, 2 cores."""
    cluster = LocalRayCluster(
        tmp_path_factory.mktemp("ray"), head=HEAD, gcs_port=GCS_PORT, port_base=PORT_BASE
    )
    try:
        cluster.start()
        for address in (PREFILL_NODE, DECODE_NODE):
            cluster.add_worker(address, gpus=0)  # the CPU build takes no GPU
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def ray_plane(cluster, tmp_path_factory, vllm_setup):
    env = {
        **vllm_env(vllm_setup),
        "PDCTL_RAY_ADDRESS": cluster.address,
        "PDCTL_RAY_NODE_IP": HEAD,
    }
    plane = ControlPlane(tmp_path_factory.mktemp("ray-plane"), env)
    plane.read_timeout = plane.write_timeout = harness.PLANE_TIMEOUT_S
    try:
        plane.start(90)
        yield plane
    finally:
        plane.close()


def placed_spec(setup) -> dict:
    spec = harness.pd_spec("ray-nixl", setup.model, setup.marker, "NixlConnector")
    for group, node in zip(spec["groups"], (PREFILL_NODE, DECODE_NODE), strict=True):
        group["placement"] = {"nodes": [{"address": node}], "gpus_per_instance": 0}
    return spec


@pytest.fixture(scope="module")
def pair(ray_plane, vllm_setup):
    with deployed(ray_plane, placed_spec(vllm_setup), vllm_setup) as live:
        yield live


def listening_addresses(port: int) -> set[str]:
    """Every local address a TCP socket listens on at `port`: dotted IPv4 from /proc/net/tcp,
    "[hex]" for IPv6 (any of which would be more than the node's address)."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, _, hex_port = fields[1].rpartition(":")
            if fields[3] != "0A" or int(hex_port, 16) != port:
                continue
            if table == "tcp":
                found.add(".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)))
            else:
                found.add(f"[{address}]")
    return found


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").partition("=")[::2] for e in raw if b"=" in e)


def test_each_instance_listens_on_its_node_address_only(pair, ray_plane):
    units = ray_plane.status(pair.name)
    assert units["proxy"]["address"] == HEAD, units["proxy"]
    assert pair.proxy_url == units["proxy"]["url"]
    assert listening_addresses(units["proxy"]["ports"]["http"]) == {HEAD}
    for name, node in (("prefill-0", PREFILL_NODE), ("decode-0", DECODE_NODE)):
        unit, ports = units[name], units[name]["ports"]
        assert unit["address"] == node, unit
        assert unit["node"], unit  # the Ray node id it was placed on
        assert unit["url"] == f"http://{node}:{ports['http']}", unit
        # The API server and NIXL's side channel, each on the node's address and nowhere
        # else (not on 127.0.0.1, not on every address).
        for port in (ports["http"], ports["side_channel"]):
            assert listening_addresses(port) == {node}, (name, port)
    assert units["prefill-0"]["node"] != units["decode-0"]["node"]


def test_side_channel_host_is_the_node_address(pair, ray_plane):
    """What the controller renders (the command preview) is what the engine runs with."""
    _, commands = ray_plane.api("GET", f"/deployments/{pair.name}/commands")
    units = ray_plane.status(pair.name)
    for name, node in (("prefill-0", PREFILL_NODE), ("decode-0", DECODE_NODE)):
        shown, port = commands[name], units[name]["ports"]["side_channel"]
        assert shown["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == node, shown["env"]
        assert shown["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(port), shown["env"]
        argv = shown["argv"]
        assert argv[argv.index("--host") + 1] == node, argv
        running = environ(units[name]["pid"])
        assert running["VLLM_NIXL_SIDE_CHANNEL_HOST"] == node
        assert running["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(port)


def test_greedy_completion_equals_colocated_and_kv_moves(pair, reference, vllm_setup):
    before = pair.metrics("decode-0")
    output = greedy(client(pair), vllm_setup.model, *REQUEST)
    after = pair.metrics("decode-0")
    # Same text, same prompt and completion token counts as the colocated run.
    assert output == reference[REQUEST], (output, reference[REQUEST])

    def moved(name: str, **labels: str) -> float:
        return metric_value(after, name, **labels) - metric_value(before, name, **labels)

    # The prompt is new to the decode: all of it arrived from the prefill's node by NIXL.
    assert moved("vllm:prompt_tokens_by_source_total", **EXTERNAL) == output.prompt_tokens
    assert moved("vllm:nixl_xfer_time_seconds_count") >= 1
    assert moved("vllm:nixl_bytes_transferred_sum") > 0
    assert metric_value(after, "vllm:nixl_num_failed_transfers_total") == 0


def test_stop_leaves_no_vllm_and_no_ray_process(pair, ray_plane, cluster, vllm_setup):
    """Last: the deployment stops through the API, then serve and the cluster stop."""
    units = harness.stop(ray_plane, pair.name)
    assert {u["state"] for u in units.values()} <= {"STOPPED", "EXITED"}, units
    assert harness.wait_gone(pair, vllm_setup.model, vllm_setup.marker, timeout=30) == []
    ray_plane.close()
    cluster.stop()
    left = ray_processes(cluster)
    deadline = time.monotonic() + 15
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = ray_processes(cluster)
    assert left == [], left
    for port in (PORT_BASE, GCS_PORT):
        assert listening_addresses(port) == set(), port


def ray_processes(cluster: LocalRayCluster) -> list[tuple[int, str]]:
    """Every live process of this cluster's nodes, or naming its temp dir (zombies aside)."""
    pids = {p for a in (HEAD, PREFILL_NODE, DECODE_NODE) for p in cluster.processes_of(a)}
    pids |= {i.pid for i in harness.processes() if str(cluster.temp_dir) in i.cmdline}
    alive = {i.pid: i.cmdline for i in harness.processes()}
    return sorted((p, alive[p][:200]) for p in pids if p in alive)
