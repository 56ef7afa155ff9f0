"""`make run-cluster`: the dashboard on a local Ray cluster, with a demo deployment whose
prefill and decode run on different nodes.

It starts a Ray cluster on this machine (a head without GPUs and two workers with 2 GPUs
declared each, every node on its own loopback address), then `pdctl serve --ray-address` on
it, creates the cluster demo of services/demo/deployments.py through the API and starts it. Ctrl-C
stops
`pdctl serve`, then every process of the cluster, and says whether any was left. Its database,
run directories and Ray's files live in a temporary folder, removed at the end.

The addresses can be moved, to run beside another cluster on this machine:
PDCTL_DEMO_RAY_HEAD (default 127.0.0.4), PDCTL_DEMO_RAY_GCS_PORT (46379),
PDCTL_DEMO_RAY_PORT_BASE (47000: node i takes 1000 ports from base + 1000 i),
PDCTL_DEMO_RAY_WORKERS (127.0.0.2,127.0.0.3), PDCTL_DEMO_PORT (the dashboard's, 8000).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from harness.owned_cluster import AddressesTaken, ClusterPlan, Worker, owned_cluster
from harness.processes import ROOT, http_get, http_post
from harness.ray_cluster import GCS_PORT, HEAD_ADDRESS, PORT_BASE
from services.demo.deployments import (
    DECODE_NODE_RESOURCE,
    DEMO_NAME,
    PREFILL_NODE_RESOURCE,
    cluster_demo_body,
)

WORKERS = ("127.0.0.2", "127.0.0.3")
GPUS_PER_WORKER = 2
RESOURCES = ({PREFILL_NODE_RESOURCE: 1.0}, {DECODE_NODE_RESOURCE: 1.0})  # one per worker


def plan_from(env: Mapping[str, str]) -> ClusterPlan:
    """The demo cluster, at the addresses `env` moves it to."""
    workers = [a.strip() for a in env.get("PDCTL_DEMO_RAY_WORKERS", ",".join(WORKERS)).split(",")]
    if len(workers) != len(RESOURCES):
        raise SystemExit(f"PDCTL_DEMO_RAY_WORKERS: give {len(RESOURCES)} addresses")
    return ClusterPlan(
        workers=[
            Worker(address, GPUS_PER_WORKER, dict(resources))
            for address, resources in zip(workers, RESOURCES, strict=True)
        ],
        head=env.get("PDCTL_DEMO_RAY_HEAD", HEAD_ADDRESS),
        gcs_port=int(env.get("PDCTL_DEMO_RAY_GCS_PORT", GCS_PORT)),
        port_base=int(env.get("PDCTL_DEMO_RAY_PORT_BASE", PORT_BASE)),
    )


def start_serve(folder: Path, plan: ClusterPlan, port: int) -> subprocess.Popen:
    """`pdctl serve` on the cluster, its log on this terminal; in its own session, so that
    Ctrl-C reaches this script, which stops it first and the cluster after."""
    env = {
        **os.environ,
        "PDCTL_RAY_ADDRESS": f"{plan.head}:{plan.gcs_port}",
        "PDCTL_RAY_NODE_IP": plan.head,  # the control plane's node is the head
        "PDCTL_DB": str(folder / "pdctl.db"),
        "PDCTL_RUNTIME_DIR": str(folder / "runs"),
    }
    argv = [sys.executable, str(ROOT / "pdctl.py"), "serve", "--host", "127.0.0.1"]
    return subprocess.Popen([*argv, "--port", str(port)], cwd=ROOT, env=env, start_new_session=True)


def wait_healthy(serve: subprocess.Popen, url: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            raise RuntimeError(f"pdctl serve exited with code {serve.returncode}")
        with contextlib.suppress(OSError):
            if http_get(url + "/health", timeout=1.0)[0] == 200:
                return
        time.sleep(0.2)
    raise TimeoutError(f"pdctl serve did not answer at {url} within {timeout:g} s")


def start_demo(url: str, timeout: float = 120.0) -> list[dict]:
    """Create and start the cluster demo; its units once all run."""
    status, body = http_post(url + "/api/deployments", cluster_demo_body())
    if status != 201:
        raise RuntimeError(f"creating the demo deployment: {status} {body}")
    status, body = http_post(url + f"/api/deployments/{DEMO_NAME}/start", {})
    if status != 202:
        raise RuntimeError(f"starting the demo deployment: {status} {body}")
    deadline = time.monotonic() + timeout
    units: list[dict] = []
    while time.monotonic() < deadline:
        units = _status(url)
        if units and all(u["state"] == "RUNNING" for u in units):
            return units
        time.sleep(1.0)
    states = ", ".join(f"{u['name']} {u['state']}" for u in units)
    raise TimeoutError(f"the demo deployment is not running after {timeout:g} s: {states}")


def _status(url: str) -> list[dict]:
    status, raw = http_get(url + f"/api/deployments/{DEMO_NAME}/status", timeout=10)
    return json.loads(raw) if status == 200 else []


def stop_serve(serve: subprocess.Popen) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut it short
    if serve.poll() is None:
        print("stopping pdctl serve ...", flush=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(serve.pid, signal.SIGINT)  # uvicorn's graceful shutdown
        try:
            serve.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(serve.pid, signal.SIGKILL)
            serve.wait(timeout=10)
    # It said which processes keep running for the next serve to adopt: here the cluster they
    # run on is stopped next, and its folder (the database too) removed.
    print(
        f"pdctl serve stopped (exit code {serve.returncode}); what it left running goes with "
        "the Ray cluster, stopped now",
        flush=True,
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    plan = plan_from(os.environ)
    port = int(os.environ.get("PDCTL_DEMO_PORT", "8000"))
    url = f"http://127.0.0.1:{port}"
    for signum in (signal.SIGTERM, signal.SIGHUP):  # as Ctrl-C: stop everything
        signal.signal(signum, _interrupt)
    folder = Path(tempfile.mkdtemp(prefix="pdctl-cluster-demo-"))
    print(f"starting a local Ray cluster: {plan.describe()}; files in {folder}", flush=True)
    code = 0
    try:
        with owned_cluster(plan, folder / "ray"):
            serve = start_serve(folder, plan, port)
            try:
                code = _serve_demo(serve, url)
            finally:
                stop_serve(serve)
    except KeyboardInterrupt:
        pass
    except AddressesTaken as exc:
        print(
            f"run-cluster: the demo cluster's addresses are taken: {exc}. Stop that cluster, "
            "or move this one (PDCTL_DEMO_RAY_HEAD, PDCTL_DEMO_RAY_GCS_PORT, "
            "PDCTL_DEMO_RAY_PORT_BASE, PDCTL_DEMO_RAY_WORKERS)",
            file=sys.stderr,
        )
        code = 2
    except (RuntimeError, TimeoutError) as exc:
        print(f"run-cluster: {exc}", file=sys.stderr)
        code = 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return code


def _serve_demo(serve: subprocess.Popen, url: str) -> int:
    wait_healthy(serve, url)
    units = start_demo(url)
    where = ", ".join(f"{u['name']} on {u['address']}" for u in units)
    print(
        f"\npdctl dashboard: {url}/deployments/{DEMO_NAME}  (running on Ray: {where}; "
        f"Run load from the page; the nodes: {url}/cluster)\n"
        "Ctrl-C stops pdctl serve and the whole Ray cluster.\n",
        flush=True,
    )
    serve.wait()
    print(f"pdctl serve exited by itself (code {serve.returncode})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
