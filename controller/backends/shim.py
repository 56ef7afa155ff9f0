"""`pdctl run-instance`: the small keeper each instance runs under, in the spirit of conmon.

It detaches (new session, reparented away from whoever started it), starts the instance in its
own process group, owns its output pipe and writes it to size-capped rotating logs, writes a
state file (shim pid, child pid and /proc start time, argv, started_at) atomically, forwards
SIGTERM/SIGINT to the child's group, records the exit code when the child exits, and exits.
So an instance outlives a crash of `pdctl serve`, which adopts it from the state file.

Files, under RUN_DIR/NAME/: state.json, output.log, output.log.1 ... output.log.KEEP, all 0600
in 0700 directories (an instance's output may quote its secrets). RUN_DIR is made absolute
before anything else, so the supervisor and the shim always mean the same directory.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.backends import private_files, procfs
from domain import secret_files

PR_SET_PDEATHSIG = 1
STATE_FILE = "state.json"
LOG_FILE = "output.log"
READY_TIMEOUT_S = 10.0


class ShimError(RuntimeError):
    """The shim could not start the instance."""


def instance_dir(run_dir: Path, name: str) -> Path:
    return Path(run_dir) / name


def read_state(run_dir: Path, name: str) -> dict[str, Any] | None:
    """None for a file that is missing, torn or cannot be read (not ours to trust then)."""
    path = instance_dir(run_dir, name) / STATE_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_state(run_dir: Path, name: str, state: dict[str, Any]) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one. On a full
    disk there is no room for the new copy, so the file is rewritten in its own blocks
    instead: then a reader may find it torn (read_state says None, as for a missing file),
    which beats never telling the supervisor why the logs stopped."""
    folder = instance_dir(run_dir, name)
    text = json.dumps(state, indent=1)
    try:
        secret_files.replace(folder / STATE_FILE, text.encode())
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        with open(folder / STATE_FILE, "r+b", opener=private_files.opener) as f:
            f.write(text.encode())
            f.truncate()


class RotatingLog:
    """Append-only log capped at `max_bytes` per file, `keep` rotated files kept.

    A write that fails (disk full, quota) never stops the instance: the output is dropped,
    `error` says why, and writing is tried again after RETRY_S.
    """

    RETRY_S = 5.0

    def __init__(self, path: Path, max_bytes: int, keep: int) -> None:
        self.path, self.max_bytes, self.keep = path, max_bytes, keep
        self.file: Any = None  # None: not open (a read-only or full run dir); tried again
        self.size = 0
        self.error: str | None = None
        self.dropped = 0
        self._retry_at = 0.0
        self._open()

    def _open(self) -> None:
        try:
            self.file = open(self.path, "ab", buffering=0, opener=private_files.opener)  # noqa: SIM115
            self.size = self.path.stat().st_size
        except OSError as exc:
            self.file = None
            self.error = f"logs stopped: {exc.strerror or exc}"
            self._retry_at = time.monotonic() + self.RETRY_S

    def write(self, chunk: bytes) -> None:
        if self.error is not None and time.monotonic() < self._retry_at:
            self.dropped += len(chunk)
            return
        try:
            if self.file is None:
                self._open()
                if self.file is None:
                    self.dropped += len(chunk)
                    return
            if self.size and self.size + len(chunk) > self.max_bytes:
                self.rotate()
            self.file.write(chunk)
        except OSError as exc:
            self.error = f"logs stopped: {exc.strerror or exc}"
            self.dropped += len(chunk)
            self._retry_at = time.monotonic() + self.RETRY_S
            return
        self.size += len(chunk)
        self.error = None

    def rotate(self) -> None:
        self.file.close()
        self.file = None  # reopened below, or on a later write if that fails
        for i in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        if self.keep > 0:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink()
        self.file = open(self.path, "ab", buffering=0, opener=private_files.opener)  # noqa: SIM115
        self.size = 0

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def launch(
    run_dir: Path, name: str, argv: list[str], *, max_bytes: int = 10 << 20, keep: int = 3
) -> dict[str, Any]:
    """Detach a shim that runs `argv`; return its state once the child runs."""
    run_dir = Path(run_dir).absolute()
    private_files.private_dir(instance_dir(run_dir, name))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the shim
        os.close(read_end)
        code = 70
        try:
            os.setsid()  # its own session: no signal for our group reaches it
            _detach_stdio()
            # Inherited descriptors (uvloop leaves its stdio pipes open above fd 2) would
            # keep the starter's pipes open and make it wait for us: keep only our own.
            os.closerange(3, write_end)
            os.closerange(write_end + 1, os.sysconf("SC_OPEN_MAX"))
            code = serve(run_dir, name, argv, max_bytes=max_bytes, keep=keep, ready_fd=write_end)
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        message = _read_ready(read_end)
    finally:
        os.close(read_end)
        # The shim is our child until we exit; reap it if it already failed.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    if message.get("error"):
        raise ShimError(message["error"])
    return message


def _read_ready(fd: int) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    if not data:
        return {"error": f"the shim did not report within {READY_TIMEOUT_S} s"}
    return json.loads(data)


def serve(
    run_dir: Path,
    name: str,
    argv: list[str],
    *,
    max_bytes: int,
    keep: int,
    ready_fd: int | None = None,
    orphan_grace: float | None = None,
) -> int:
    """Run `argv` to its end, keeping its log and state file; the shim's exit status. With
    `orphan_grace`, the child goes when whoever started us does (a Ray actor: its engine must
    not outlive it): SIGTERM and SIGCONT, then SIGKILL after that many seconds."""
    parent = os.getppid()
    run_dir = Path(run_dir).absolute()
    folder = private_files.private_dir(instance_dir(run_dir, name))
    log = RotatingLog(folder / LOG_FILE, max_bytes, keep)
    state: dict[str, Any] = {
        "name": name,
        "argv": argv,
        "shim_pid": os.getpid(),
        "shim_start_time": procfs.start_time(os.getpid()),
        "child_pid": None,
        "child_start_time": None,
        "started_at": time.time(),
        "exit_code": None,
        "exited_at": None,
        "error": None,
    }
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
            close_fds=True,
            # Kept by a Ray actor: the engine must not outlive us, even if we are SIGKILLed
            # (Ray kills a dead worker's children) and cannot end it ourselves.
            preexec_fn=die_with_parent if orphan_grace is not None else None,
        )
    except OSError as exc:
        state |= {
            "exit_code": 127,
            "exited_at": time.time(),
            "error": f"cannot run {argv[0]!r}: {exc.strerror or exc}",
        }
        _keep_state(run_dir, name, state)
        log.write(f"pdctl run-instance: {state['error']}\n".encode())
        log.close()
        _report(ready_fd, {"error": state["error"]})
        return 1
    state |= {"child_pid": child.pid, "child_start_time": procfs.start_time(child.pid)}
    _keep_state(run_dir, name, state)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _report(ready_fd, state)
    watch = None if orphan_grace is None else _OrphanWatch(child, parent, orphan_grace)
    _pump(
        child,
        log,
        lambda error: _note_log_error(run_dir, name, state, error),
        watch.check if watch else None,
    )
    state |= {"exit_code": child.wait(), "exited_at": time.time()}
    # What the engine left in its group goes with it (vLLM's EngineCore outliving a killed
    # API server holds its ports and memory, and the restarted instance could not start).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    _keep_state(run_dir, name, state)
    log.close()
    return 0


def _keep_state(run_dir: Path, name: str, state: dict[str, Any]) -> None:
    """The state file, if the run dir takes it: a shim that cannot write it (read-only, full)
    still runs its instance, which the supervisor knows from the report on the pipe and from
    /proc, rather than leaving it unwatched."""
    with contextlib.suppress(OSError):
        write_state(run_dir, name, state)


def _note_log_error(run_dir: Path, name: str, state: dict[str, Any], error: str | None) -> None:
    """Tell the supervisor (through the state file) why logs stopped, or that they resumed."""
    state["log_error"] = error
    with contextlib.suppress(OSError):  # the same full disk may refuse this too
        write_state(run_dir, name, state)


def _pump(
    child: subprocess.Popen,
    log: RotatingLog,
    on_log_error: Callable[[str | None], None] = lambda error: None,
    tick: Callable[[], None] | None = None,
) -> None:
    """Copy the child's output to the log until EOF, or until the child is gone and its
    descendants stay silent (a leftover grandchild may hold the pipe open). The pipe is
    always drained, so a child never blocks on output the log cannot take."""
    if child.stdout is None:
        return
    fd = child.stdout.fileno()
    reported: str | None = None
    while True:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if tick is not None:
            tick()
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            log.write(chunk)
            if log.error != reported:
                reported = log.error
                on_log_error(reported)
        elif child.poll() is not None:
            return


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """In a child before exec: `signum` when the process that started it is gone."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum)


class _OrphanWatch:
    """Ends the child once the shim's parent is gone (we are reparented)."""

    def __init__(self, child: subprocess.Popen, parent: int, grace: float) -> None:
        self.child, self.parent, self.grace = child, parent, grace
        self.kill_at: float | None = None

    def check(self) -> None:
        if self.child.poll() is not None:
            return
        if self.kill_at is None:
            if os.getppid() == self.parent:
                return
            self.kill_at = time.monotonic() + self.grace
            for signum in (signal.SIGTERM, signal.SIGCONT):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.child.pid, signum)
        elif time.monotonic() >= self.kill_at:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.pid, signal.SIGKILL)


def _report(fd: int | None, message: dict[str, Any]) -> None:
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(fd, json.dumps(message).encode())
    with contextlib.suppress(OSError):
        os.close(fd)


def _detach_stdio() -> None:
    """Hold none of the starter's pipes: whoever waits on them must not wait for us."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            os.dup2(devnull, fd)
    os.close(devnull)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115
