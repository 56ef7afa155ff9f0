"""A local Ray cluster that one run owns, for `make run-cluster` and `make bench-cluster`: its
addresses are checked free before anything starts (so stopping it can never take down another
cluster that was there first), it is always stopped at the end, Ctrl-C included, and what it
left behind is counted. The nodes themselves are harness/ray_cluster.py's."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from controller.backends import procfs
from harness.ray_cluster import (
    GCS_PORT,
    HEAD_ADDRESS,
    PORT_BASE,
    PORT_STRIDE,
    LocalRayCluster,
    all_pids,
    names_node,
)


@dataclass(frozen=True)
class Worker:
    address: str
    gpus: int
    resources: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterPlan:
    """Where the cluster's nodes listen: the head's address and GCS port, the block of ports
    its nodes take (harness/ray_cluster.py: port_stride per node from port_base), its workers."""

    workers: Sequence[Worker]
    head: str = HEAD_ADDRESS
    gcs_port: int = GCS_PORT
    port_base: int = PORT_BASE
    port_stride: int = PORT_STRIDE

    @property
    def addresses(self) -> list[str]:
        return [self.head, *(w.address for w in self.workers)]

    def describe(self) -> str:
        workers = ", ".join(f"{w.address} ({w.gpus} GPUs)" for w in self.workers)
        return f"head {self.head} (GCS {self.head}:{self.gcs_port}), workers {workers}"


class AddressesTaken(RuntimeError):
    """Another Ray cluster (or node) already uses one of the plan's addresses."""


def taken(plan: ClusterPlan) -> list[str]:
    """Why the plan's addresses are not free: a GCS answering, a Ray node already there."""
    reasons = []
    with contextlib.suppress(OSError), socket.create_connection((plan.head, plan.gcs_port), 1.0):
        reasons.append(f"something answers at {plan.head}:{plan.gcs_port}")
    for address in plan.addresses:
        if pids := node_processes(address):
            reasons.append(f"a Ray node runs at {address} (pids {', '.join(map(str, pids[:5]))})")
    return reasons


def node_processes(address: str) -> list[int]:
    """Processes started for the Ray node at exactly `address` (127.0.0.2 is not 127.0.0.21)."""
    return [pid for pid in all_pids() if names_node(procfs.command_line(pid) or [], address)]


def leftovers(plan: ClusterPlan, temp_dir: Path) -> list[int]:
    """What is still alive of the cluster: processes of its nodes, or naming its temp dir."""
    found = {pid for address in plan.addresses for pid in node_processes(address)}
    mark = str(temp_dir)
    for pid in all_pids():
        if any(mark in arg for arg in procfs.command_line(pid) or []):
            found.add(pid)
    return sorted(found)


@contextlib.contextmanager
def owned_cluster(plan: ClusterPlan, temp_dir: Path, say=print) -> Iterator[LocalRayCluster]:
    """Start the plan's cluster (AddressesTaken, nothing started, if it is not free); stop it
    whatever happens, a second Ctrl-C included, and say whether anything was left."""
    if reasons := taken(plan):
        raise AddressesTaken("; ".join(reasons))
    cluster = LocalRayCluster(
        temp_dir,
        head=plan.head,
        gcs_port=plan.gcs_port,
        port_base=plan.port_base,
        port_stride=plan.port_stride,
    )
    try:
        cluster.start()
        for worker in plan.workers:
            cluster.add_worker(worker.address, worker.gpus, worker.resources)
        yield cluster
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the stop is not cut short
        try:
            stop(cluster, plan, temp_dir, say)
        finally:
            signal.signal(signal.SIGINT, previous)


def stop(cluster: LocalRayCluster, plan: ClusterPlan, temp_dir: Path, say=print) -> list[int]:
    """Every process of the cluster, also a node whose `ray start` was cut short."""
    cluster.stop()
    for address in plan.addresses:  # the nodes the cluster had not counted yet
        for pid in node_processes(address):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    left: list[int] = []
    for _ in range(20):  # SIGKILLed processes take a moment to go
        if not (left := leftovers(plan, temp_dir)):
            break
        time.sleep(0.25)
    if left:
        say(f"Ray cluster ({plan.describe()}): {len(left)} processes left: {left}")
    else:
        say(f"Ray cluster stopped ({plan.describe()}): no Ray process left")
    return left
