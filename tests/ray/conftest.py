"""A real Ray cluster for the whole module (a head and workers on their own loopback
addresses, GPUs declared), a real `pdctl serve` joined to it, and the load and checks the tests
share. `make test-ray` runs these; `make test` leaves them out (they start a cluster)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.control_plane import ControlPlane
from harness.processes import http_post
from harness.ray_cluster import LocalRayCluster
from harness.stack import bench_background, bench_finished

ray = pytest.importorskip("ray", reason="`make test-ray` installs Ray")

HEAD = "127.0.0.4"
WORKERS = ("127.0.0.2", "127.0.0.3", "127.0.0.5")  # the last one is the spare


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    temp = tmp_path_factory.mktemp("ray")
    cluster = LocalRayCluster(temp, head=HEAD)
    try:
        cluster.start()
        for address in WORKERS:
            cluster.add_worker(address, gpus=2)
        yield cluster
    finally:
        cluster.stop()
        left = [a for a in (HEAD, *WORKERS) if cluster.processes_of(a)]
        assert not left, f"Ray processes left behind on {left}"


@pytest.fixture
def plane(cluster, tmp_path):
    plane = ControlPlane(
        tmp_path,
        {"PDCTL_RAY_ADDRESS": cluster.address, "PDCTL_RAY_NODE_IP": HEAD},
    ).start(90)
    try:
        yield plane
    finally:
        with contextlib.suppress(OSError, AssertionError):
            stop_all(plane)
        plane.close()


def restore(cluster: LocalRayCluster, address: str) -> None:
    """Bring a removed worker back (the next test expects every worker)."""
    if all(n.address != address for n in cluster.nodes):
        cluster.add_worker(address, gpus=2)


def stop_all(plane: ControlPlane) -> None:
    _, listed = plane.api("GET", "/deployments")
    for dep in listed if isinstance(listed, list) else []:
        name = dep["name"]
        status, _ = plane.api("POST", f"/deployments/{name}/stop")
        if status == 202:
            with contextlib.suppress(TimeoutError):
                plane.wait(
                    name,
                    lambda us: all(
                        u["state"] in ("STOPPED", "EXITED", "FATAL") for u in us.values()
                    ),
                    60,
                )


def complete(proxy_url: str, n: int = 8) -> dict:
    status, body = http_post(
        f"{proxy_url}/v1/completions",
        {"model": "tiny", "prompt": "one two three", "max_tokens": n, "ignore_eos": True},
        timeout=60,
    )
    assert status == 200, body
    return body


def serves(proxy_url: str) -> bool:
    try:
        return complete(proxy_url)["usage"]["completion_tokens"] == 8
    except (AssertionError, OSError):
        return False


def bench(proxy_url: str, tmp: Path, name: str, rate: float, prompts: int) -> subprocess.Popen:
    """`pdctl bench` in the background, every request's record kept (errors included)."""
    return bench_background(proxy_url, tmp, name, rate, prompts, "--save-requests")


bench_result = bench_finished


def listening_addresses(port: int) -> set[str]:
    """Every local address something listens on at `port` (IPv4, from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def listening_on(address: str) -> list[int]:
    """Ports something listens on at `address` (or on every address)."""
    ports = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        hex_address, hex_port = local.split(":")
        ip = ".".join(str(int(hex_address[i : i + 2], 16)) for i in (6, 4, 2, 0))
        if state == "0A" and ip == address:
            ports.append(int(hex_port, 16))
    return ports


def holders(address: str) -> dict[int, str]:
    """What listens on `address`, by port: for the message of a failed check."""
    from controller.backends import procfs

    found = {}
    for port in listening_on(address):
        pids = procfs.listening_pids(port) or set()
        found[port] = "; ".join(" ".join(procfs.command_line(p) or [])[:160] for p in pids)
    return found


def events(plane: ControlPlane, name: str, kind: str) -> list[dict]:
    _, found = plane.api("GET", f"/events?deployment={name}&kind={kind}")
    return found if isinstance(found, list) else []


def kill_actor(cluster: LocalRayCluster, name: str) -> None:
    """ray.kill the named actor, from a driver of its own (the test process stays Ray-free)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import ray, sys; ray.init(address=sys.argv[1], namespace='pdctl', "
            "log_to_driver=False, _node_ip_address=sys.argv[2]); "
            "ray.kill(ray.get_actor(sys.argv[3]), no_restart=True)",
            cluster.address,
            HEAD,
            name,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def history(plane: ControlPlane, name: str) -> list[dict]:
    _, found = plane.api("GET", f"/deployments/{name}/history?window=10m")
    return found.get("points", []) if isinstance(found, dict) else []


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise TimeoutError(what)
