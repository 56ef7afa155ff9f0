"""The 2P2D campaign's row "a Ray node removed": a local Ray cluster of its own (a head and three
workers, each on its own loopback address), a `pdctl serve --ray-address` joined to it, a
stand-in NIXL 2P2D spread over the workers with no node holding two instances of one role (so
a spare of each role outlives any one node), the campaign's load through the proxy, and one
worker lost under it: its raylet and everything it started SIGKILLed
(harness/ray_cluster.py's `remove`, as `make test-ray` does). Its instances must move to the
surviving nodes while the spares serve every request not yet streaming.

Its addresses (127.0.0.31-34) and ports (GCS 65379, the nodes' 62000-65199, above Linux's
ephemeral range) are apart from every other local cluster (tests/ray, tests/vllm,
`make bench-cluster`), which may run on this machine at the same time. Everything it starts
is stopped at the end, every Ray process included, and the row fails if any is left. It is
skipped only when Ray cannot be imported or its cluster cannot start, saying why.
"""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from benchmarks.chaos.load import NAME, Plane, Row, Target, deployment, recovered, under_load
from benchmarks.chaos.spares import SPARE, routable
from benchmarks.control_plane import STOPPED
from harness.owned_cluster import AddressesTaken, ClusterPlan, Worker, leftovers, owned_cluster
from harness.processes import port_range
from harness.ray_cluster import LocalRayCluster

HEAD = "127.0.0.34"
WORKERS = ("127.0.0.31", "127.0.0.32", "127.0.0.33")
PLAN = ClusterPlan(
    [Worker(a, gpus=2) for a in WORKERS],
    head=HEAD,
    gcs_port=65379,
    port_base=62000,  # 4 nodes of 800 ports: 62000-65199, all above the ephemeral range
    port_stride=800,
)
EXPECTED = f"its instances move to the surviving nodes; {SPARE}"
START_S = 150.0  # a cluster's deployment from POST start to every unit RUNNING (2 busy cores)
MOVE_S = 120.0  # a lost node's instances RUNNING elsewhere
# What `ray start` raises when a node cannot come up (no `ray`, a port or address taken, slow).
CANNOT_START = (AddressesTaken, OSError, RuntimeError, TimeoutError, subprocess.TimeoutExpired)


def spec() -> dict:
    """The campaign's proxy settings, on a NIXL 2P2D of stand-ins placed on the workers."""
    placement = {"nodes": [{"address": a} for a in WORKERS], "gpus_per_instance": 1}
    return {
        "name": NAME,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "prefix_caching": False,
        "groups": [
            {"name": role, "role": role, "count": 2, "placement": placement}
            for role in ("prefill", "decode")
        ],
        "proxy": deployment("2p2d")["proxy"],
    }


def engines(units: dict[str, dict]) -> dict[str, dict]:
    return {n: u for n, u in units.items() if n != "proxy"}


def role_of(name: str) -> str:
    return name.rsplit("-", 1)[0]


def doubled(units: dict[str, dict]) -> list[str]:
    """Each node holding two instances of one role (whose loss would take a role's spare)."""
    held = Counter((u["address"], role_of(n)) for n, u in engines(units).items())
    return [f"{a} holds {k} {role}s" for (a, role), k in sorted(held.items()) if k > 1]


def node_to_remove(units: dict[str, dict]) -> str:
    """The worker with the most instances (one of each role, when there is one), lowest
    address first: its loss moves a prefill and a decode at once."""
    held = Counter(u["address"] for u in engines(units).values())
    return min(held, key=lambda a: (-held[a], tuple(int(x) for x in a.split("."))))


def on_node(units: dict[str, dict], address: str) -> list[str]:
    return sorted(n for n, u in engines(units).items() if u["address"] == address)


def moves(before: dict[str, dict], after: dict[str, dict], lost: str) -> list[str]:
    """What moved off the lost node, and where to: 'prefill-0 127.0.0.31 -> 127.0.0.32'."""
    return [f"{n} {lost} -> {after.get(n, {}).get('address')}" for n in on_node(before, lost)]


def moved(units: dict[str, dict], names: list[str], lost: str) -> bool:
    """Every one of `names` RUNNING again, on a node other than the lost one."""
    return all(
        units[n]["state"] == "RUNNING" and units[n]["address"] not in (lost, None) for n in names
    )


class RayPlane(Plane):
    """A chaos control plane that places on a Ray cluster, in a port range of its own."""

    def __init__(self, tmp: Path, cluster_address: str, beside: Plane) -> None:
        super().__init__(tmp)
        while self.env["PDCTL_PORT_RANGE"] == beside.env["PDCTL_PORT_RANGE"]:
            self.env["PDCTL_PORT_RANGE"] = port_range()
        self.env |= {"PDCTL_RAY_ADDRESS": cluster_address, "PDCTL_RAY_NODE_IP": HEAD}


def last_line(exc: BaseException) -> str:
    """What a failed `ray start` says last (its tracebacks end with the reason)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:240]


def say(message: str) -> None:
    print(f"chaos: {message}", file=sys.stderr, flush=True)


def ray_node_removed(target: Target) -> Row:
    row = Row("a Ray node removed", EXPECTED)
    if importlib.util.find_spec("ray") is None:
        row.skipped = "Ray is not importable here (`pip install -e '.[dev]'` installs it)"
        return row
    tmp = target.tmp / "ray"
    begin = time.monotonic()
    with contextlib.ExitStack() as stack:
        try:
            cluster = stack.enter_context(owned_cluster(PLAN, tmp / "cluster", say=say))
        except CANNOT_START as exc:
            row.skipped = f"the Ray cluster could not start: {last_line(exc)}"
            return row
        row.notes.append(f"cluster up in {time.monotonic() - begin:.0f} s")
        (tmp / "plane").mkdir()
        plane = RayPlane(tmp / "plane", cluster.address, target.plane)
        stack.callback(plane.close)
        try:
            plane.start(90)
            stack.callback(stop_deployment, plane)
            lose_a_node(plane, cluster, target.prompts, row)
        except (TimeoutError, RuntimeError, OSError) as exc:
            row.check(False, f"{type(exc).__name__}: {str(exc)[-240:]}")
        stopping = time.monotonic()
    left = leftovers(PLAN, tmp)  # Ray's and pdctl's: whatever names the row's folder
    row.check(not left, f"no process left (pids {left[:5]})")
    row.notes.append(
        f"stopped in {time.monotonic() - stopping:.0f} s; row {time.monotonic() - begin:.0f} s"
    )
    return row


def lose_a_node(plane: RayPlane, cluster: LocalRayCluster, prompts: int, row: Row) -> None:
    """Deploy, check the spread, remove the busiest worker under load, see its instances move."""
    status, created = plane.api("POST", "/deployments", spec())
    if status != 201:
        raise RuntimeError(f"creating the deployment answered {status}: {created}")
    plane.api("POST", f"/deployments/{NAME}/start")
    starting = time.monotonic()
    units = plane.running(NAME, START_S)
    row.notes.append(f"2P2D running in {time.monotonic() - starting:.0f} s")
    row.check(not doubled(units), f"one instance per role a node: {doubled(units)}")
    target = Target(plane, units["proxy"]["url"], created["ports"]["registry"], plane.tmp, prompts)
    row.check(routable(target) is not None, "the proxy routes to every instance before the load")
    victim = node_to_remove(units)

    def inject(row: Row) -> None:
        before = plane.units()
        gone = on_node(before, victim)
        killed = cluster.remove(victim)
        lost_at = time.monotonic()
        row.notes.append(f"{victim} removed ({len(killed)} processes SIGKILLed): {gone}")
        after = plane.wait(NAME, lambda us: moved(us, gone, victim), MOVE_S)
        row.notes += moves(before, after, victim)
        row.recovery_s = recovered(plane, target.proxy_url, lost_at)
        row.notes.append(f"{len(node_lost_events(plane))} node_lost events")

    under_load(target, row, inject)


def node_lost_events(plane: RayPlane) -> list[dict]:
    _, found = plane.api("GET", f"/events?deployment={NAME}&kind=node_lost")
    return found if isinstance(found, list) else []


def stop_deployment(plane: RayPlane, limit: float = 60.0) -> None:
    """Stop the deployment and wait until its processes are gone (before the cluster goes)."""
    with contextlib.suppress(OSError):
        plane.api("POST", f"/deployments/{NAME}/stop")
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and any(
            u["state"] not in STOPPED for u in plane.units().values()
        ):
            time.sleep(0.3)


ROWS: dict[str, Callable[[Target], Row]] = {"a Ray node removed": ray_node_removed}
