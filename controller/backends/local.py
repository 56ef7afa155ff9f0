"""The supervisor's one seam to processes: spawn under the shim, read state files, signal.

Two backends: `ShimBackend` here (local processes, the default) and `RayBackend`
(controller/backends/ray.py: the same shim run by one actor per instance on a Ray cluster's
nodes). Both list the nodes processes may be placed on (controller/launch/placement.py); only the
state machine above them is shared.

`ShimBackend` is the real local one (`pdctl run-instance` via asyncio subprocess, argv lists only,
the environment of controller/launch/child_env.py); tests pass a fake with the same methods. A
process is ours only while its pid, its start time and its command line are the ones the
shim recorded: a recycled pid, or a pid file pointing at someone else's process, is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from controller.backends import procfs, shim
from controller.launch.child_env import child_environment
from controller.launch.placement import Node

ROOT = Path(__file__).resolve().parents[2]
SPAWN_TIMEOUT_S = 20.0


class SpawnError(RuntimeError):
    """The shim could not start the process."""


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """What a state file says about one process."""

    name: str
    child_pid: int | None
    child_start_time: int | None = None
    shim_pid: int | None = None
    shim_start_time: int | None = None
    started_at: float | None = None  # wall clock
    exit_code: int | None = None
    exited: bool = False
    argv: tuple[str, ...] = ()
    log_error: str | None = None  # why the shim stopped writing logs (disk full, ...)
    node_id: str | None = None  # the cluster node it runs on (None: this host)
    node_address: str | None = None
    lost: str | None = None  # why it died with no exit code seen (its node is gone, ...)
    node_lost: bool = False  # ... because its node is gone
    gpu_ids: list[int] = field(default_factory=list)  # what a cluster assigned it
    # The child's CPU demand (procfs.cpu_demand) as its node read it with this record; None
    # where the supervisor reads /proc itself (this host)
    cpu_demand: int | None = None

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ProcessRecord:
        return cls(
            name=state.get("name", ""),
            child_pid=state.get("child_pid"),
            child_start_time=state.get("child_start_time"),
            shim_pid=state.get("shim_pid"),
            shim_start_time=state.get("shim_start_time"),
            started_at=state.get("started_at"),
            exit_code=state.get("exit_code"),
            exited=state.get("exited_at") is not None,
            argv=tuple(state.get("argv", ())),
            log_error=state.get("log_error"),
        )


@dataclass(frozen=True, slots=True)
class PortHolder:
    """A process listening on a port an instance is about to take."""

    pid: int | None  # None: a process we may not look into (another user's)
    start_time: int | None = None
    cmdline: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.pid is None:
            return "a process of another user"
        return f"pid {self.pid} ({' '.join(self.cmdline)[:120] or 'no command line'})"


@dataclass(frozen=True, slots=True)
class Where:
    """The node a process is to run on and what it takes there."""

    node: Node
    gpus: float = 0.0
    gpu_env: str = "CUDA_VISIBLE_DEVICES"  # the variable the assigned GPU indices go in


LOCAL_NODE_ID = "local"


class ProcessBackend(Protocol):
    clustered: bool  # True: processes run on a cluster's nodes, placed by the controller
    multi_node: bool  # True: one instance may span nodes

    async def nodes(self) -> list[Node]: ...

    def home(self, nodes: list[Node]) -> Node: ...

    async def refresh(self) -> None: ...

    async def spawn(
        self,
        run_dir: Path,
        name: str,
        argv: list[str],
        env: dict[str, str],
        where: Where | None = None,
    ) -> ProcessRecord: ...

    def read(self, run_dir: Path, name: str) -> ProcessRecord | None: ...

    def running(self, record: ProcessRecord) -> bool: ...

    def signal(self, record: ProcessRecord, signum: int) -> None: ...

    def forget(self, run_dir: Path, name: str) -> None: ...

    def log_tail(self, run_dir: Path, name: str, lines: int) -> list[str]: ...

    def port_holders(self, port: int) -> list[PortHolder]: ...


class ShimBackend:
    """Processes under `pdctl run-instance`, each in its own session, outliving us."""

    clustered = False
    multi_node = False

    def __init__(
        self,
        shim_command: tuple[str, ...] = (sys.executable, str(ROOT / "pdctl.py")),
        proc: Path = procfs.PROC,
        log_max_bytes: int = 10 << 20,
        log_keep: int = 3,
        address: str = "127.0.0.1",
    ) -> None:
        self.shim_command, self.proc = shim_command, proc
        self.log_max_bytes, self.log_keep = log_max_bytes, log_keep
        self.address = address

    async def nodes(self) -> list[Node]:
        """This host, its GPUs not counted (a spec names their ids)."""
        return [Node(LOCAL_NODE_ID, self.address, head=True)]

    def home(self, nodes: list[Node]) -> Node:
        return nodes[0]

    async def refresh(self) -> None:
        """Nothing to pull: state files are read where they are."""

    async def spawn(
        self,
        run_dir: Path,
        name: str,
        argv: list[str],
        env: dict[str, str],
        where: Where | None = None,
    ) -> ProcessRecord:
        launcher = await asyncio.create_subprocess_exec(
            *self.shim_command,
            "run-instance",
            "--run-dir",
            str(Path(run_dir).absolute()),
            "--name",
            name,
            "--log-max-bytes",
            str(self.log_max_bytes),
            "--log-keep",
            str(self.log_keep),
            "--",
            *argv,
            env=child_environment(os.environ, env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            cwd=str(ROOT),
        )
        try:
            out, err = await asyncio.wait_for(launcher.communicate(), SPAWN_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                launcher.kill()
            await launcher.wait()
            raise SpawnError(f"the shim for {name} did not report in {SPAWN_TIMEOUT_S} s") from None
        if launcher.returncode != 0:
            raise SpawnError(
                err.decode(errors="replace").strip()[-500:]
                or f"the shim exited with {launcher.returncode}"
            )
        return ProcessRecord.from_state(json.loads(out))

    def read(self, run_dir: Path, name: str) -> ProcessRecord | None:
        state = shim.read_state(run_dir, name)
        return ProcessRecord.from_state(state) if state else None

    def running(self, record: ProcessRecord) -> bool:
        """Alive: the child is the very process that started (a recycled pid is not), or the
        shim is still about to record the child's exit."""
        if record.exited or record.child_pid is None:
            return False
        if self._is_ours(record):
            return True
        # The child is gone but its shim lives: it records the exit within its 1 s poll.
        shim_pid = record.shim_pid
        return (
            shim_pid is not None
            and procfs.is_same_process(shim_pid, record.shim_start_time, self.proc)
            and _is_shim_of(procfs.command_line(shim_pid, self.proc), record.name)
        )

    def signal(self, record: ProcessRecord, signum: int) -> None:
        """Signal the child's whole process group, only if the child is still ours. SIGTERM is
        followed by SIGCONT (as systemd does): a stopped (SIGSTOPped, hung) process could not
        act on it until someone continued it, and would only go at the SIGKILL deadline."""
        pid = record.child_pid
        if pid is None or not self._is_ours(record):
            return
        # The shim makes its child a group leader; a process adopted by its port may not be.
        kill = os.killpg if _group_leader(pid) else os.kill
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signum)
            if signum == signal.SIGTERM:
                kill(pid, signal.SIGCONT)

    def _is_ours(self, record: ProcessRecord) -> bool:
        pid = record.child_pid
        return (
            pid is not None
            and procfs.is_same_process(pid, record.child_start_time, self.proc)
            and procfs.launched_as(procfs.command_line(pid, self.proc), record.argv)
        )

    def forget(self, run_dir: Path, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (shim.instance_dir(run_dir, name) / shim.STATE_FILE).unlink()

    def log_tail(self, run_dir: Path, name: str, lines: int) -> list[str]:
        return log_tail(shim.instance_dir(run_dir, name) / shim.LOG_FILE, lines)

    def port_holders(self, port: int) -> list[PortHolder]:
        pids = procfs.listening_pids(port, self.proc)
        if pids is None:
            return [PortHolder(None)]
        return [
            PortHolder(
                pid,
                procfs.start_time(pid, self.proc),
                tuple(procfs.command_line(pid, self.proc) or ()),
            )
            for pid in sorted(pids)
        ]


def _is_shim_of(cmdline: list[str] | None, name: str) -> bool:
    """`pdctl run-instance ... --name NAME ... -- ARGV`, as ShimBackend.spawn starts it."""
    if not cmdline or "run-instance" not in cmdline:
        return False
    own = cmdline[cmdline.index("run-instance") :]
    own = own[: own.index("--")] if "--" in own else own
    return any(own[i : i + 2] == ["--name", name] for i in range(len(own) - 1))


def _group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def log_tail(path: Path, lines: int) -> list[str]:
    """The last `lines` lines of a rotated log (reaching into output.log.1 if needed)."""
    tail: deque[str] = deque(maxlen=max(0, lines))
    for part in (path.with_name(path.name + ".1"), path):
        with contextlib.suppress(FileNotFoundError), open(part, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))  # enough for any sane tail
            for line in f.read().decode(errors="replace").splitlines():
                tail.append(line)
    return list(tail)


def settled(
    backend: ProcessBackend, run_dir: Path, name: str, seen: ProcessRecord
) -> ProcessRecord:
    """The record of a process `running` said is gone, read once more: its shim may have
    written the exit code down, and gone, between the read of `seen` and that check."""
    return backend.read(run_dir, name) or seen
