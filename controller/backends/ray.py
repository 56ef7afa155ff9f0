"""Processes on a Ray cluster: one detached, named actor per process
(controller/backends/ray_host.py).

It connects to an existing cluster (`pdctl serve --ray-address`); an unreachable one is an
error before anything starts. Placement is the controller's (controller/launch/placement.py, from
the
nodes listed here); each actor is pinned to its node (node affinity, hard) and asks Ray for the
instance's GPUs, so Ray assigns the indices. Actors are named DEPLOYMENT.PROCESS in one
namespace, so a restarted `pdctl serve` finds them again by name (adoption).

State reaches us only through the actors: `refresh()` (before each supervisor pass, at most
every `refresh_interval`) asks every actor for its shim's state at once, and the synchronous
methods the supervisor calls read that cache. An actor that cannot be reached any more is a
process that died; if its node is gone too, the record says so (the event names the node).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from controller.backends.local import PortHolder, ProcessRecord, SpawnError, Where
from controller.launch.placement import Node
from domain.errors import Unavailable

log = logging.getLogger("pdctl.ray")
HEAD_RESOURCE = "node:__internal_head__"
CALL_TIMEOUT_S = 5.0
# Ray marks a node dead only after its health checks fail for a while (tens of seconds by
# default); an actor whose node cannot even be connected to tells us sooner. Such a node is
# not placed on for this long, or until Ray has decided.
SUSPECT_S = 120.0
UNREACHABLE = (
    "failed to connect",
    "connection refused",
    "socket closed",
    "temporarily unavailable",
    "node has been marked dead",
    "node died",
)


class RayUnreachable(Unavailable):
    """No Ray cluster answers at the configured address."""


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnreachable(f"--ray-address {address!r} is not HOST:PORT (the GCS address)")
    return host, int(port)


class RayBackend:
    clustered = True
    multi_node = False  # one instance across nodes: refused by name for now

    def __init__(
        self,
        address: str,
        *,
        namespace: str = "pdctl",
        node_ip: str | None = None,
        refresh_interval: float = 1.0,
        spawn_timeout: float = 60.0,
        log_max_bytes: int = 10 << 20,
        log_keep: int = 3,
    ) -> None:
        self.address, self.namespace, self.node_ip = address, namespace, node_ip
        self.refresh_interval, self.spawn_timeout = refresh_interval, spawn_timeout
        self.log_max_bytes, self.log_keep = log_max_bytes, log_keep
        self._handles: dict[str, Any] = {}  # actor name -> handle
        self._records: dict[str, ProcessRecord] = {}
        self._tails: dict[str, list[str]] = {}
        self._looked_up: set[str] = set()
        self._refreshed = 0.0
        self._node_cache: list[Node] = []
        self._suspect: dict[str, float] = {}  # node id -> until (monotonic): not answering
        self._fingerprint: str | None = None

    # Connection ---------------------------------------------------------------------------

    def connect(self) -> None:
        """Join the cluster as a driver; RayUnreachable (nothing started) if it does not
        answer. A quick TCP check first: ray.init would otherwise retry for a minute."""
        host, port = _split_address(self.address)
        try:
            with socket.create_connection((host, port), timeout=2.0):
                pass
        except OSError as exc:
            raise RayUnreachable(
                f"no Ray cluster answers at {self.address} ({exc.strerror or exc}); "
                "start one (`ray start --head`) or fix --ray-address"
            ) from None
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            import ray
        except ImportError:
            raise RayUnreachable(
                "Ray is not installed here: pip install 'pdctl[ray]' (the same on every node)"
            ) from None

        from controller.backends.ray_host import fingerprint

        try:
            ray.init(
                address=self.address,
                namespace=self.namespace,
                log_to_driver=False,
                logging_level=logging.WARNING,
                _node_ip_address=self.node_ip,
            )
        except Exception as exc:  # Ray raises several kinds; all mean "not joined"
            raise RayUnreachable(f"cannot join the Ray cluster at {self.address}: {exc}") from None
        self._fingerprint = fingerprint()

    def close(self) -> None:
        """Leave the cluster; the detached actors (and so the processes) stay."""
        import ray

        with contextlib.suppress(Exception):
            ray.shutdown()

    # Nodes --------------------------------------------------------------------------------

    async def nodes(self) -> list[Node]:
        self._node_cache = await asyncio.to_thread(self._list_nodes)
        return self._node_cache

    def _list_nodes(self) -> list[Node]:
        import ray
        from ray._private import state as ray_state

        try:  # Ray's own per-node free resources; private, so counted totals if it goes
            free = ray_state.available_resources_per_node()
        except Exception:
            free = {}
        nodes = []
        for raw in ray.nodes():
            total = raw.get("Resources", {})
            node_id = raw["NodeID"]
            available = free.get(node_id, total)
            nodes.append(
                Node(
                    id=node_id,
                    address=raw["NodeManagerAddress"],
                    gpus=float(total.get("GPU", 0.0)),
                    gpus_free=float(available.get("GPU", 0.0)),
                    resources={
                        k: float(v)
                        for k, v in total.items()
                        if not k.startswith("node:") and k not in ("CPU", "GPU")
                    },
                    labels=dict(raw.get("Labels") or {}),
                    alive=bool(raw.get("Alive")) and not self._is_suspect(node_id),
                    head=HEAD_RESOURCE in total,
                )
            )
        return nodes

    def _is_suspect(self, node_id: str) -> bool:
        until = self._suspect.get(node_id)
        if until is not None and time.monotonic() >= until:
            del self._suspect[node_id]
            return False
        return until is not None

    def home(self, nodes: list[Node]) -> Node:
        """The control plane's node: the one at our address, else the head."""
        alive = [n for n in nodes if n.alive]
        for node in alive:
            if self.node_ip and node.address == self.node_ip:
                return node
        return next((n for n in alive if n.head), alive[0])

    # Processes ----------------------------------------------------------------------------

    def actor_name(self, run_dir: Path, name: str) -> str:
        return f"{Path(run_dir).name}.{name}"

    async def spawn(
        self,
        run_dir: Path,
        name: str,
        argv: list[str],
        env: dict[str, str],
        where: Where | None = None,
    ) -> ProcessRecord:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from controller.backends.ray_host import RemoteInstanceHost

        if where is None:
            raise SpawnError(f"{name}: a Ray cluster needs a node for every process")
        actor = self.actor_name(run_dir, name)
        await asyncio.to_thread(self._kill, actor)
        port = _port_of(argv)
        handle = RemoteInstanceHost.options(
            name=actor,
            namespace=self.namespace,
            lifetime="detached",
            num_gpus=where.gpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(where.node.id, soft=False),
        ).remote(
            deployment=Path(run_dir).name,
            name=name,
            argv=argv,
            env=env,
            gpu_env=where.gpu_env,
            namespace=self.namespace,
            expected_fingerprint=self._fingerprint or "",
            port=port or 0,
            log_max_bytes=self.log_max_bytes,
            log_keep=self.log_keep,
        )
        try:
            state = await asyncio.wait_for(handle.state.remote(), self.spawn_timeout)  # type: ignore[attr-defined]  # Ray types an actor method as the class's (no .remote)
        except TimeoutError:
            await asyncio.to_thread(self._kill, actor)
            raise SpawnError(
                f"{name}: Ray did not start its actor on {where.node.describe()} within "
                f"{self.spawn_timeout:g} s (are its {where.gpus:g} GPUs free there?)"
            ) from None
        except ray.exceptions.RayError as exc:
            await asyncio.to_thread(self._kill, actor)
            raise SpawnError(f"{name} on {where.node.describe()}: {_cause(exc)}") from None
        self._handles[actor] = handle
        record = self._record(state)
        self._records[actor] = record
        return record

    async def refresh(self) -> None:
        now = time.monotonic()
        if now - self._refreshed < self.refresh_interval or not self._handles:
            return
        self._refreshed = now
        names = list(self._handles)
        results = await asyncio.gather(
            *(self._state_of(self._handles[n]) for n in names), return_exceptions=True
        )
        dead = [
            (n, r)
            for n, r in zip(names, results, strict=True)
            if isinstance(r, BaseException) and not _is_timeout(r)
        ]
        for actor, exc in dead:
            record = self._records.get(actor)
            if record is not None and record.node_id and _unreachable(exc):
                self._suspect[record.node_id] = time.monotonic() + SUSPECT_S
        if dead:
            await self.nodes()
        for actor, result in zip(names, results, strict=True):
            if isinstance(result, dict):
                self._records[actor] = self._record(result)
            elif actor in self._records and not _is_timeout(result):
                self._records[actor] = self._lost(self._records[actor], result)

    async def _state_of(self, handle: Any) -> dict[str, Any]:
        return await asyncio.wait_for(handle.state.remote(), CALL_TIMEOUT_S)

    def _lost(self, record: ProcessRecord, exc: BaseException) -> ProcessRecord:
        node = next((n for n in self._node_cache if n.id == record.node_id), None)
        where = f"node {record.node_address} ({(record.node_id or '?')[:12]})"
        if node is None or not node.alive:
            why = f"died with its node: {where} is gone (it does not answer)"
            return replace(record, exited=True, lost=why, node_lost=True)
        why = f"its Ray actor on {where} died ({_cause(exc)}), and the instance with it"
        return replace(record, exited=True, lost=why)

    def _record(self, state: dict[str, Any]) -> ProcessRecord:
        record = ProcessRecord.from_state(state)
        self._tails[state.get("name", "")] = list(state.get("tail") or [])
        return replace(
            record,
            exited=record.exited or not state.get("running", False),
            node_id=state.get("node_id"),
            node_address=state.get("node_address"),
            gpu_ids=[int(g) for g in state.get("gpu_ids") or []],
            cpu_demand=state.get("cpu_demand"),
        )

    def read(self, run_dir: Path, name: str) -> ProcessRecord | None:
        actor = self.actor_name(run_dir, name)
        if actor not in self._records and actor not in self._looked_up:
            self._looked_up.add(actor)  # adoption: find the actor by name, once
            self._adopt(actor)
        return self._records.get(actor)

    def _adopt(self, actor: str) -> None:
        import ray

        try:
            # Any: Ray types a looked-up actor's methods as Never
            handle: Any = ray.get_actor(actor, namespace=self.namespace)
            state = ray.get(handle.state.remote(), timeout=CALL_TIMEOUT_S)
        except (ValueError, ray.exceptions.RayError):
            return  # no such actor, or it is dead: nothing to adopt
        self._handles[actor] = handle
        self._records[actor] = self._record(state)

    def running(self, record: ProcessRecord) -> bool:
        return not record.exited and record.child_pid is not None

    def signal(self, record: ProcessRecord, signum: int) -> None:
        handle = self._handles.get(self._actor_of(record))
        if handle is not None:
            handle.signal.remote(signum)  # fire and forget: the next refresh shows the result

    def _actor_of(self, record: ProcessRecord) -> str:
        """The actor keeping `record`'s process (pids are per node, so the node too)."""
        key = (record.name, record.child_pid, record.node_id)
        return next(
            (a for a, r in self._records.items() if (r.name, r.child_pid, r.node_id) == key), ""
        )

    def forget(self, run_dir: Path, name: str) -> None:
        actor = self.actor_name(run_dir, name)
        self._records.pop(actor, None)
        self._tails.pop(name, None)
        if self._handles.pop(actor, None) is not None:
            self._kill(actor)

    def _kill(self, actor: str) -> None:
        import ray

        with contextlib.suppress(ValueError, ray.exceptions.RayError):
            ray.kill(ray.get_actor(actor, namespace=self.namespace), no_restart=True)

    def log_tail(self, run_dir: Path, name: str, lines: int) -> list[str]:
        import ray

        handle = self._handles.get(self.actor_name(run_dir, name))
        if handle is not None:
            with contextlib.suppress(ray.exceptions.RayError):
                return ray.get(handle.log_tail.remote(lines), timeout=CALL_TIMEOUT_S)
        return self._tails.get(name, [])[-lines:] if lines > 0 else []

    def port_holders(self, port: int) -> list[PortHolder]:
        return []  # checked on the node itself, by the actor, before it starts anything


def _port_of(argv: list[str]) -> int | None:
    for flag, value in itertools.pairwise(argv):
        if flag == "--port" and value.isdigit():
            return int(value)
    return None


def _unreachable(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(sign in text for sign in UNREACHABLE)


def _is_timeout(exc: BaseException) -> bool:
    import ray

    return isinstance(exc, TimeoutError | ray.exceptions.GetTimeoutError)


def _cause(exc: BaseException) -> str:
    """The one line that says why: Ray wraps an actor's own error in pages of traceback."""
    text = str(exc).strip().splitlines()
    for line in reversed(text):
        if "HostError:" in line:
            return line.split("HostError:", 1)[1].strip()
    return (text[-1] if text else type(exc).__name__)[:300]
