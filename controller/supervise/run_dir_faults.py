"""The supervisor's own I/O on the run dir (state files, restart counts, the deployment's
record) treated as a fault, not a crash: a write that fails is told once as an event naming
the path and the error, its deployment is degraded until the same write works again (tried
again every pass), and the pass goes on, so a dead process is still seen dead and replaced.

A read-only or full run dir once made every pass stop at its first failed unlink: a SIGKILLed
instance stayed RUNNING with its dead pid for as long as the fault lasted (issue 39)."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from controller.backends.local import ProcessBackend

log = logging.getLogger("pdctl.supervisor")
Emit = Callable[[str, str, str | None], None]  # (kind, message, deployment)
Write = Callable[[], object]  # its result is not used


@dataclass(frozen=True, slots=True)
class Fault:
    deployment: str | None  # None: the run dir itself, every deployment in it
    path: str
    error: str

    def describe(self) -> str:
        return f"cannot write {self.path}: {self.error}"


def explain(exc: OSError) -> str:
    """`[Errno 30] Read-only file system` as `EROFS: Read-only file system`."""
    name = errno.errorcode.get(exc.errno or 0, "")
    said = exc.strerror or str(exc)
    return f"{name}: {said}" if name else said


class RunDirFaults:
    """Failed writes by key (what was written, e.g. a state file's folder), each with the
    write to try again. `attempt` runs a write; `retry` tries the failed ones again."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._failed: dict[str, tuple[Fault, Write]] = {}

    def attempt(
        self, deployment: str | None, key: str, write: Write, again: Write | None = None
    ) -> bool:
        """Run `write`; False (and a fault, told once) if it failed with an OSError. `again`:
        what to try on later passes instead (default: `write` itself)."""
        try:
            write()
        except OSError as exc:
            self._fail(deployment, key, exc, again or write)
            return False
        self._worked(key)
        return True

    def retry(self) -> None:
        """Every failed write, once more (the latest one given for each key)."""
        for key, (fault, write) in list(self._failed.items()):
            self.attempt(fault.deployment, key, write)

    def of(self, deployment: str) -> list[Fault]:
        """What degrades `deployment` now: its own failed writes and the run dir's."""
        return [f for f, _ in self._failed.values() if f.deployment in (deployment, None)]

    def clear(self, key: str) -> None:
        """What `key` names works again (a fault without a write of its own to retry)."""
        self._worked(key)

    def _fail(self, deployment: str | None, key: str, exc: OSError, write: Write) -> None:
        fault = Fault(deployment, str(exc.filename or key), explain(exc))
        before = self._failed.get(key)
        self._failed[key] = (fault, write)
        if before is not None and before[0] == fault:
            return  # told already: one event per fault, not one per pass
        log.warning("run dir: %s", fault.describe())
        self._emit(
            "run_dir_fault",
            f"{fault.describe()}; the deployment is degraded until it can be written again "
            "(processes are judged by what runs, not by their state files)",
            deployment,
        )

    def _worked(self, key: str) -> None:
        before = self._failed.pop(key, None)
        if before is not None:
            fault = before[0]
            log.info("run dir: %s can be written again", fault.path)
            self._emit("run_dir_recovered", f"{fault.path} can be written again", fault.deployment)


def forget_record(
    faults: RunDirFaults, backend: ProcessBackend, deployment: str, folder: Path, name: str
) -> None:
    """Drop the state file of `name`'s process, which is gone. Tried again later only while
    the file records no process that runs: a later spawn's file is never lost."""

    def again() -> None:
        record = backend.read(folder, name)
        if record is None or not backend.running(record):
            backend.forget(folder, name)

    faults.attempt(deployment, str(folder / name), lambda: backend.forget(folder, name), again)
