"""The Ray actor that keeps one process of a deployment on its node.

One detached, named actor per process (controller/backends/ray.py creates them). It runs the same
shim as local processes, `pdctl run-instance --foreground`, as its own child under a
parent-death signal, and the shim ends the engine when its parent goes (--orphan-grace): an
actor or a node that dies takes its engine with it. The shim's run directory is this node's
own; the controller learns state and logs only through the actor's methods, which read them
here with the local backend's checks (pid, start time and command line).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ray

from controller.backends import private_files, procfs, shim
from controller.backends.local import ProcessRecord, ShimBackend
from controller.launch.child_env import child_environment

ROOT = Path(__file__).resolve().parents[2]
ORPHAN_GRACE_S = 5.0
READY_S = 20.0
TAIL_LINES = 8  # sent with every state: the last words of a process that died with its node
PACKAGES = ("domain", "state", "connector", "controller", "simulator", "bench", "observe", "web")


def fingerprint(root: Path = ROOT) -> str:
    """What identifies this pdctl: a hash of its Python sources (every node must run the same)."""
    digest = hashlib.sha256()
    files = [root / "pdctl.py", *sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))]
    for path in files:
        with contextlib.suppress(OSError):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def node_run_root(address: str, namespace: str) -> Path:
    """This node's run directory for one control plane's namespace (one per node address, so
    nodes sharing a machine, as in tests, keep theirs apart)."""
    base = os.environ.get("PDCTL_NODE_RUN_DIR") or os.path.join(
        tempfile.gettempdir(), f"pdctl-node-{address}"
    )
    return Path(base).absolute() / namespace


def _die_with_parent() -> None:
    """In the shim, before exec: SIGTERM (it then ends its engine) when the actor is gone."""
    shim.die_with_parent(signal.SIGTERM)


class HostError(RuntimeError):
    """The process could not be started on this node."""


class InstanceHost:
    """One process on this node, kept by the shim; see the module docstring."""

    def __init__(
        self,
        *,
        deployment: str,
        name: str,
        argv: list[str],
        env: dict[str, str],
        gpu_env: str,
        namespace: str,
        expected_fingerprint: str,
        port: int,
        log_max_bytes: int = 10 << 20,
        log_keep: int = 3,
    ) -> None:
        self.name = name
        self.node_id = ray.get_runtime_context().get_node_id()
        self.address = ray.util.get_node_ip_address()
        self.local = ShimBackend(address=self.address)
        mine = fingerprint()
        if mine != expected_fingerprint:
            raise HostError(
                f"node {self.address} runs another pdctl (sources {mine}, the control plane's "
                f"{expected_fingerprint}): install the same pdctl on every node (or, if "
                "pdctl was upgraded here since `pdctl serve` started, restart it)"
            )
        holders = self.local.port_holders(port)
        if holders:
            raise HostError(
                f"port {port} on node {self.address} is held by "
                f"{', '.join(h.describe() for h in holders)}; not starting a second copy"
            )
        self.run_dir = private_files.private_dir(
            node_run_root(self.address, namespace) / deployment
        )
        child_env = dict(env)
        gpus = [str(int(float(g))) for g in ray.get_gpu_ids()]
        if gpus:
            child_env[gpu_env] = ",".join(gpus)  # Ray's indices, in the variable the engine reads
        self.gpus = gpus
        with contextlib.suppress(FileNotFoundError):
            (shim.instance_dir(self.run_dir, name) / shim.STATE_FILE).unlink()
        # Ray's own settings for its workers are not the engine's business.
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "pdctl.py"),
                "run-instance",
                "--foreground",
                "--orphan-grace",
                str(ORPHAN_GRACE_S),
                "--run-dir",
                str(self.run_dir),
                "--name",
                name,
                "--log-max-bytes",
                str(log_max_bytes),
                "--log-keep",
                str(log_keep),
                "--",
                *argv,
            ],
            env=child_environment(base, child_env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # prctl must run in the child, before exec
            cwd=str(ROOT),
        )
        self._wait_started()

    def _wait_started(self) -> None:
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            state = shim.read_state(self.run_dir, self.name)
            if state and (state.get("child_pid") or state.get("exited_at")):
                if state.get("error"):
                    raise HostError(state["error"])
                return
            if self.proc.poll() is not None:
                raise HostError(f"the shim exited with {self.proc.returncode} before starting")
            time.sleep(0.05)
        raise HostError(f"the shim for {self.name} did not start it within {READY_S} s")

    def state(self) -> dict[str, Any]:
        """The shim's state, whether the child still runs, where, and its last log lines."""
        state = shim.read_state(self.run_dir, self.name) or {"name": self.name}
        record = ProcessRecord.from_state(state)
        pid = record.child_pid
        return {
            **state,
            "running": self.local.running(record),
            # read here, on its node: the supervisor judges a silent /health by it (probing.py)
            "cpu_demand": None if pid is None else procfs.cpu_demand(pid),
            "node_id": self.node_id,
            "node_address": self.address,
            "gpu_ids": self.gpus,
            "tail": self.local.log_tail(self.run_dir, self.name, TAIL_LINES),
        }

    def signal(self, signum: int) -> None:
        state = shim.read_state(self.run_dir, self.name)
        if state:
            self.local.signal(ProcessRecord.from_state(state), signum)

    def log_tail(self, lines: int) -> list[str]:
        return self.local.log_tail(self.run_dir, self.name, lines)

    def ping(self) -> str:
        return self.node_id


RemoteInstanceHost = ray.remote(num_cpus=0, max_restarts=0)(InstanceHost)
