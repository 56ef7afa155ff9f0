"""`make bench-cluster`: pdctl on a Ray cluster against local processes, both measured in the
same run on this machine, with the same stand-ins.

1. Start to serving: from POST /api/deployments/NAME/start of a stand-in MoRIIO 1P1D (tiny
   model) to every process RUNNING and a first completion answered through the proxy; rounds
   alternate between `pdctl serve --ray-address` (P and D on two workers) and a `pdctl serve`
   of local processes (the baseline). Medians, and Ray / local.
2. `pdctl serve`'s CPU (utime + stime of its /proc/PID/stat, every thread) while it
   supervises and scrapes a stand-in NIXL deployment of 16 prefill + 16 decode instances at a
   1 s scrape interval (PDCTL_SCRAPE_INTERVAL=1), over 60 s with no load, as a share of one
   core: on Ray, one GPU each of the 8 declared on each of 4 workers; the baseline the same
   deployment as local processes.

The cluster is a local one (harness/owned_cluster.py), apart from the Ray tests': head
127.0.0.24 (GCS 56379, Ray's ports from 57000), workers 127.0.0.21-23 and 127.0.0.25 (flags
move them). Every process is stopped at the end. Run it in a checkout nobody edits meanwhile:
a Ray node refuses to start a process once pdctl's sources on disk differ from those `pdctl
serve` started with (the fingerprint check of controller/backends/ray_host.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from harness.control_plane import ControlPlane
from harness.owned_cluster import ClusterPlan, Worker, owned_cluster
from harness.processes import http_post

TICKS = os.sysconf("SC_CLK_TCK")
STOPPED = ("STOPPED", "EXITED", "FATAL")
HEAD, GCS_PORT, PORT_BASE = "127.0.0.24", 56379, 57000
WORKERS = ("127.0.0.21", "127.0.0.22", "127.0.0.23", "127.0.0.25")
GPUS_PER_WORKER = 8
AIM = 0.20  # of one core, for 32 instances across 4 nodes at 1 s


def pair_spec(name: str) -> dict:
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "prefix_caching": False,
        "groups": [
            {"name": "prefill", "role": "prefill", "mode": "read"},
            {"name": "decode", "role": "decode", "mode": "read"},
        ],
    }


def fleet_spec(name: str, instances: int) -> dict:
    """`instances` stand-in NIXL instances, half prefill, half decode, one GPU each."""
    placement = {"gpus_per_instance": 1}
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [
            {"name": "prefill", "role": "prefill", "count": instances // 2, "placement": placement},
            {"name": "decode", "role": "decode", "count": instances - instances // 2,
             "placement": placement},
        ],
    }  # fmt: skip


# Measuring -----------------------------------------------------------------------------------


def wait_states(plane: ControlPlane, name: str, states: tuple[str, ...], timeout: float) -> dict:
    """Units once every one is in `states`, polled often (the poll bounds the resolution)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        units = plane.status(name)
        if units and all(u["state"] in states for u in units.values()):
            return units
        if "FATAL" not in states and any(u["state"] == "FATAL" for u in units.values()):
            _, events = plane.api("GET", f"/events?deployment={name}&limit=3")
            raise RuntimeError(f"{name}: a process is FATAL: {[e['message'] for e in events]}")
        time.sleep(0.05)
    left = {n: u["state"] for n, u in plane.status(name).items() if u["state"] not in states}
    raise TimeoutError(f"{name}: not {'/'.join(states)} after {timeout:g} s: {left}")


def first_completion(proxy: str, timeout: float = 60.0) -> None:
    body = {"model": "tiny", "prompt": "one two", "max_tokens": 2}
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            status, last = http_post(proxy + "/v1/completions", body, timeout=10)
            if status == 200:
                return
        except OSError as exc:
            last = exc
        time.sleep(0.02)
    raise TimeoutError(f"no completion through {proxy} in {timeout:g} s: {last}")


def start(plane: ControlPlane, name: str) -> None:
    status, body = plane.api("POST", f"/deployments/{name}/start")
    if status != 202:
        raise RuntimeError(f"start {name}: {status} {body}")


def stop(plane: ControlPlane, name: str, timeout: float = 300) -> None:
    plane.api("POST", f"/deployments/{name}/stop")
    wait_states(plane, name, STOPPED, timeout)


def create(plane: ControlPlane, body: dict) -> None:
    status, created = plane.api("POST", "/deployments", body)
    if status != 201:
        raise RuntimeError(f"create {body['name']}: {status} {created}")


def start_to_serving(plane: ControlPlane, name: str) -> tuple[float, float, dict]:
    """Seconds to all RUNNING and to a first completion, and where the units ran."""
    began = time.monotonic()
    start(plane, name)
    units = wait_states(plane, name, ("RUNNING",), 180)
    running = time.monotonic() - began
    first_completion(units["proxy"]["url"])
    serving = time.monotonic() - began
    stop(plane, name)
    time.sleep(1.0)  # let the last stop's exits settle before the next start
    return running, serving, {n: u["address"] for n, u in units.items()}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def serve_cpu(plane: ControlPlane, name: str, seconds: float, settle: float) -> dict:
    """Start the fleet, let it settle, then `pdctl serve`'s share of a core over `seconds`."""
    began = time.monotonic()
    start(plane, name)
    units = wait_states(plane, name, ("RUNNING",), 1200)
    started = time.monotonic() - began
    time.sleep(settle)  # the spawns' own work done, scrapes steady
    pid = plane.server.proc.pid
    c0, (b0, t0), w0 = cpu_seconds(pid), machine_busy(), time.monotonic()
    time.sleep(seconds)
    c1, (b1, t1), w1 = cpu_seconds(pid), machine_busy(), time.monotonic()
    running = sum(u["state"] == "RUNNING" for u in plane.status(name).values())
    stop(plane, name)
    return {
        "instances": len(units) - 1,
        "nodes": len({u["address"] for n, u in units.items() if n != "proxy"}),
        "started_s": round(started, 1),
        "serve_core_share": (c1 - c0) / (w1 - w0),
        "machine_busy_share": (b1 - b0) / max(1, t1 - t0),
        "running_at_end": running - 1,
    }


# The run -------------------------------------------------------------------------------------


def plane_env(cluster_address: str | None, head: str) -> dict[str, str]:
    env = {"PDCTL_SCRAPE_INTERVAL": "1"}
    if cluster_address:
        env.update(PDCTL_RAY_ADDRESS=cluster_address, PDCTL_RAY_NODE_IP=head)
    return env


def bench_start(planes: dict[str, ControlPlane], rounds: int) -> dict[str, dict]:
    results: dict[str, dict] = {kind: {"running": [], "serving": []} for kind in planes}
    for plane in planes.values():
        create(plane, pair_spec("pair"))
    for i in range(rounds):
        for kind, plane in planes.items():  # alternate, so both see the same machine
            running, serving, where = start_to_serving(plane, "pair")
            results[kind]["running"].append(running)
            results[kind]["serving"].append(serving)
            results[kind]["where"] = where
            print(
                f"start round {i + 1}/{rounds} {kind}: all RUNNING {running:.2f} s, "
                f"first completion {serving:.2f} s ({_where(where)})",
                flush=True,
            )
    return results


def bench_cpu(
    planes: dict[str, ControlPlane], instances: int, seconds: float, settle: float
) -> dict[str, dict]:
    results = {}
    for kind, plane in planes.items():
        create(plane, fleet_spec("fleet", instances))
        results[kind] = serve_cpu(plane, "fleet", seconds, settle)
        print(f"cpu {kind}: {results[kind]}", flush=True)
    return results


def report(starts: dict[str, dict] | None, cpu: dict[str, dict] | None, args) -> None:
    print()
    if starts:
        print(
            f"start to serving, stand-in MoRIIO 1P1D (tiny), {args.rounds} rounds each "
            "(POST start -> all RUNNING -> first completion through the proxy):"
        )
        base = statistics.median(starts["local"]["serving"])
        for kind, r in starts.items():
            running, serving = statistics.median(r["running"]), statistics.median(r["serving"])
            print(
                f"  {kind:5} median all RUNNING {running:.2f} s, serving {serving:.2f} s "
                f"(min {min(r['serving']):.2f}, max {max(r['serving']):.2f}), "
                f"x local {serving / base:.2f}"
            )
    if cpu:
        print(
            f"pdctl serve CPU while it supervises and scrapes stand-in NIXL instances at 1 s, "
            f"{args.seconds:g} s with no load (% of one core; the machine's {os.cpu_count()} "
            "cores' busy share beside it):"
        )
        base = cpu["local"]["serve_core_share"]
        for kind, r in cpu.items():
            share = r["serve_core_share"]
            aim = f", aim under {AIM:.0%}: {'met' if share < AIM else 'missed'}"
            print(
                f"  {kind:5} {r['instances']} instances on {r['nodes']} node(s): "
                f"{share:.1%} of a core, x local {share / base:.2f} (started in "
                f"{r['started_s']} s; machine {r['machine_busy_share']:.0%} busy; "
                f"{r['running_at_end']} RUNNING at the end){aim if kind == 'ray' else ''}"
            )


def _where(where: dict) -> str:
    placed = ", ".join(f"{n} on {a}" for n, a in sorted(where.items()) if a)
    return placed or "this host"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--instances", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=15.0)
    parser.add_argument("--only", choices=("start", "cpu"))
    parser.add_argument("--head", default=HEAD)
    parser.add_argument("--gcs-port", type=int, default=GCS_PORT)
    parser.add_argument("--port-base", type=int, default=PORT_BASE)
    parser.add_argument("--workers", default=",".join(WORKERS))
    args = parser.parse_args()
    workers = args.workers.split(",")
    plan = ClusterPlan(
        [Worker(a, GPUS_PER_WORKER) for a in workers], args.head, args.gcs_port, args.port_base
    )
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    print(f"Ray cluster: {plan.describe()}; files in {tmp}", flush=True)
    starts = cpu = None
    with owned_cluster(plan, tmp / "cluster") as cluster:
        planes: dict[str, ControlPlane] = {}
        try:
            for kind, address in (("local", None), ("ray", cluster.address)):
                (tmp / kind).mkdir()
                planes[kind] = ControlPlane(tmp / kind, plane_env(address, plan.head)).start(90)
            if args.only in (None, "start"):
                starts = bench_start(planes, args.rounds)
            if args.only in (None, "cpu"):
                cpu = bench_cpu(planes, args.instances, args.seconds, args.settle)
        finally:
            for plane in planes.values():
                plane.close()
    report(starts, cpu, args)


if __name__ == "__main__":
    main()
