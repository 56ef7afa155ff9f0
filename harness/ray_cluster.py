"""A real Ray cluster on this machine, one loopback address per node, for tests, benchmarks and
`make run-cluster`: a head (no GPUs: the control plane's node) and workers with GPUs declared
as resources. Each node is started by `ray start` as an operator would (so the cluster is an
existing one, independent of whoever uses it), with every Ray port fixed out of the tests' and
deployments' ranges (by default in 46000-59999; a cluster beside others takes its own block),
no dashboard and no usage stats.

`remove(address)` is a lost node: its raylet and every process it started are SIGKILLed;
`stop()` takes the whole cluster down and leaves no Ray process behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from controller.backends import procfs

RAY = str(Path(sys.executable).with_name("ray"))
HEAD_ADDRESS = "127.0.0.4"  # Ray rewrites a head on 127.0.0.1 to the host's own IP
GCS_PORT = 46379
PORT_BASE = 47000  # node i listens in PORT_BASE + PORT_STRIDE i ... + PORT_STRIDE - 1
PORT_STRIDE = 1000


@dataclass
class RayNode:
    address: str
    gpus: int
    resources: dict[str, float] = field(default_factory=dict)


def _ray_env(node_run_dir: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if node_run_dir is not None:  # what the node's actors keep their shims' files in
        env["PDCTL_NODE_RUN_DIR"] = str(node_run_dir)
    env.update(
        RAY_USAGE_STATS_ENABLED="0",
        RAY_DISABLE_DOCKER_CPU_WARNING="1",
        RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="0",
    )
    return env


def _ports(port_base: int, index: int, stride: int = PORT_STRIDE) -> list[str]:
    """Every port a node listens on, from its own block of `stride` (index 0: the head)."""
    base = port_base + index * stride
    return [
        f"--node-manager-port={base}",
        f"--object-manager-port={base + 1}",
        f"--metrics-export-port={base + 2}",
        f"--dashboard-agent-grpc-port={base + 3}",
        f"--dashboard-agent-listen-port={base + 4}",
        f"--runtime-env-agent-port={base + 5}",
        f"--min-worker-port={base + 100}",
        f"--max-worker-port={base + stride - 1}",
    ]


class LocalRayCluster:
    """Start with `start()`, add workers, `stop()` at the end (also on failure)."""

    def __init__(
        self,
        temp_dir: Path,
        head_cpus: int = 2,
        head: str = HEAD_ADDRESS,
        gcs_port: int = GCS_PORT,
        port_base: int = PORT_BASE,
        port_stride: int = PORT_STRIDE,
    ) -> None:
        """Clusters side by side need their own `head` address, `gcs_port` and `port_base`."""
        self.temp_dir = Path(temp_dir)
        self.head_cpus, self.head, self.port_base = head_cpus, head, port_base
        self.port_stride = port_stride
        self.nodes: list[RayNode] = []
        self._next_index = 1  # port blocks are never reused, even after a node is removed
        self.address = f"{head}:{gcs_port}"
        self.gcs_port = gcs_port

    def start(self) -> LocalRayCluster:
        args = [
            "--head",
            f"--port={self.gcs_port}",
            "--include-dashboard=false",
            f"--num-cpus={self.head_cpus}",
            "--num-gpus=0",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
        ]
        try:
            self._ray_start(0, self.head, args)
        except RuntimeError:
            # On a busy machine (real vLLM just stopped) the head sometimes times out waiting
            # for its own GCS ("Failed to get node info: Deadline Exceeded"), as a re-added
            # worker does: clear what it started and try once more on fresh node ports.
            self.stop()
            time.sleep(2.0)
            index, self._next_index = self._next_index, self._next_index + 1
            self._ray_start(index, self.head, args)
        return self

    def add_worker(self, address: str, gpus: int, resources: dict[str, float] | None = None):
        index, self._next_index = self._next_index, self._next_index + 1
        args = [f"--address={self.address}", "--num-cpus=8", f"--num-gpus={gpus}"]
        if resources:
            import json

            args.append(f"--resources={json.dumps(resources)}")
        try:
            self._ray_start(index, address, args)
        except RuntimeError:
            # A node re-added at a lost node's address sometimes times out registering with a
            # busy GCS ("Failed to get node info: Deadline Exceeded"): clear what it started
            # and try once more on fresh ports.
            self.remove(address)
            time.sleep(2.0)
            index, self._next_index = self._next_index, self._next_index + 1
            self._ray_start(index, address, args)
        self.nodes.append(RayNode(address, gpus, dict(resources or {})))
        self.wait_nodes(len(self.nodes) + 1)

    def _ray_start(self, index: int, address: str, args: list[str]) -> None:
        done = subprocess.run(
            [
                RAY,
                "start",
                f"--node-ip-address={address}",
                *_ports(self.port_base, index, self.port_stride),
                *args,
            ],
            env=_ray_env(self.temp_dir / f"node-{address}"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"ray start ({address}) failed:\n{done.stdout}\n{done.stderr}")

    def wait_nodes(self, count: int, timeout: float = 60.0) -> None:
        """Until `count` nodes are alive (the GCS knows them)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive_count() >= count:
                return
            time.sleep(0.5)
        raise TimeoutError(f"the Ray cluster did not reach {count} live nodes in {timeout} s")

    def alive_count(self) -> int:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import ray,sys; ray.init(address=sys.argv[1], log_to_driver=False, "
                "_node_ip_address=sys.argv[2]); "
                "print('pdctl-alive', sum(n['Alive'] for n in ray.nodes()))",
                self.address,
                self.head,
            ],
            env=_ray_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        # Ray writes its own lines to stdout too (e.g. "raylet has lagging heartbeats" on a
        # busy machine), before or after ours: read only the marked one.
        found = re.search(r"^pdctl-alive (\d+)$", done.stdout, re.MULTILINE)
        return int(found[1]) if done.returncode == 0 and found else 0

    def processes_of(self, address: str) -> list[int]:
        """Every Ray process of the node at `address`, and everything they started."""
        roots = [pid for pid in all_pids() if names_node(procfs.command_line(pid) or [], address)]
        return sorted(set(roots) | {d for r in roots for d in _descendants(r)})

    def remove(self, address: str) -> list[int]:
        """Lose the node at `address`: SIGKILL its raylet, its workers and all they started."""
        pids = self.processes_of(address)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.nodes = [n for n in self.nodes if n.address != address]
        return pids

    def stop(self) -> None:
        """Every process of this cluster's nodes (not `ray stop`, which would take every Ray
        cluster on the machine), then anything left that names our temp dir."""
        addresses = [n.address for n in self.nodes] + [self.head]
        for _ in range(10):  # a parent may start a child between our listing and our kill
            if not any(self.processes_of(a) for a in addresses):
                break
            for address in addresses:
                self.remove(address)
            time.sleep(0.2)
        for pid in all_pids():
            if str(self.temp_dir) in " ".join(procfs.command_line(pid) or []) or self._ours(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def _ours(self, pid: int) -> bool:
        """Started on one of our nodes (its environment names our node run dirs), even if
        orphaned: what a test must not leave behind whatever went wrong."""
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False
        return f"PDCTL_NODE_RUN_DIR={self.temp_dir}".encode() in environ


NODE_IP_FLAGS = ("--node-ip-address", "--node_ip_address")


def names_node(argv: list[str], address: str) -> bool:
    """A Ray process of the node at exactly `address` (127.0.0.2 is not 127.0.0.21)."""
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        following = argv[i + 1] if i + 1 < len(argv) else None
        if flag in NODE_IP_FLAGS and (value if eq else following) == address:
            return True
    return False


def all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _descendants(root: int) -> set[int]:
    parents = {pid: _parent(pid) for pid in all_pids()}
    found: set[int] = set()
    frontier = {root}
    while frontier:
        children = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= children
        frontier = children
    return found
