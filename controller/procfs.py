"""Reading /proc: is a pid still the process we started? (a pid alone can be recycled).

The /proc root is a parameter, as in prometheus client_python's process collector, so tests can
point it at a fake tree.
"""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def start_time(pid: int, proc: Path = PROC) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); None if
    there is no such process or it is a zombie (dead, not yet reaped)."""
    try:
        raw = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    rest = raw[raw.rindex(")") + 2 :].split()
    state, ticks = rest[0], rest[19]
    if state in ("Z", "X"):
        return None
    return int(ticks)


def is_same_process(pid: int, started: int | None, proc: Path = PROC) -> bool:
    """True if `pid` is alive and is the process that started at `started` ticks."""
    now = start_time(pid, proc)
    return now is not None and started is not None and now == started
