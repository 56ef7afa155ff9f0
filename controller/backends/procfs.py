"""Reading /proc: is a pid still the process we started (a pid alone can be recycled: its start
time and command line say), and which processes listen on a port.

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


def cpu_ticks(pid: int, proc: Path = PROC) -> int | None:
    """The CPU the process has used (user + system clock ticks, fields 14-15 of
    /proc/PID/stat); None when it is gone, a zombie, or stopped (SIGSTOP, traced): a stopped
    process makes no progress, whatever it used before."""
    try:
        raw = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = raw[raw.rindex(")") + 2 :].split()
    if rest[0] in ("Z", "X", "T", "t"):
        return None
    return int(rest[11]) + int(rest[12])


def cpu_demand(pid: int, proc: Path = PROC) -> int | None:
    """The CPU the process used or waited for on a run queue, in ns, over all its threads
    (/proc/PID/task/*/schedstat: run time, run-queue wait). A process starved on a busy host
    waits on the run queue and this grows although it ran little; a hung (deadlocked, blocked)
    one sleeps, and a stopped one is off the queue: neither grows. None when it is gone, a
    zombie or stopped; its CPU ticks where the kernel keeps no schedstat."""
    ticks = cpu_ticks(pid, proc)
    if ticks is None:
        return None
    total, seen = 0, False
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        tasks = []
    for task in tasks:
        try:
            run_ns, wait_ns, *_ = (task / "schedstat").read_text().split()
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
            continue
        total, seen = total + int(run_ns) + int(wait_ns), True
    return total if seen else ticks


def is_same_process(pid: int, started: int | None, proc: Path = PROC) -> bool:
    """True if `pid` is alive and is the process that started at `started` ticks."""
    now = start_time(pid, proc)
    return now is not None and started is not None and now == started


def command_line(pid: int, proc: Path = PROC) -> list[str] | None:
    """The process's argv as the kernel has it (/proc/PID/cmdline); None if it is gone."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0")[:-1]] if raw else None


# Programs that run the rest of their command line in their own place (the same pid), so the
# process shows the command they ran: `nice -n 10 vllm serve M` runs as `vllm serve M`.
EXEC_WRAPPERS = frozenset({"nice", "ionice", "taskset", "chrt", "numactl", "env", "stdbuf"})


def launched_as(cmdline: list[str] | None, argv: list[str] | tuple[str, ...]) -> bool:
    """True if a process with `cmdline` is what running `argv` made. The kernel rewrites the
    head of a script's argv (`vllm serve M` runs as `/venv/bin/python /venv/bin/vllm serve M`),
    so the arguments must match exactly and the program by its base name. A launcher that
    starts with an exec wrapper (EXEC_WRAPPERS) matches the command the wrapper ran."""
    if not cmdline or not argv:
        return False
    if _ran(cmdline, argv):
        return True
    if Path(argv[0]).name not in EXEC_WRAPPERS:
        return False
    # Where the wrapper's own options end is its own grammar: any later start will do, as
    # everything after it must still match the command line exactly.
    return any(_ran(cmdline, argv[start:]) for start in range(1, len(argv)))


def _ran(cmdline: list[str], argv: list[str] | tuple[str, ...]) -> bool:
    args = list(argv[1:])
    if len(cmdline) < len(args) + 1 or cmdline[len(cmdline) - len(args) :] != args:
        return False
    program = cmdline[len(cmdline) - len(args) - 1]
    return Path(program).name == Path(argv[0]).name


def listening_pids(port: int, proc: Path = PROC) -> set[int] | None:
    """The pids holding a TCP socket that listens on `port` (any address, IPv4 or IPv6): an
    empty set if nothing listens, None if something listens but its owner is not ours to
    see (another user's process)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except (FileNotFoundError, PermissionError):
            continue
        for line in lines:
            fields = line.split()
            # local_address is HEXADDR:HEXPORT; state 0A is LISTEN; field 9 is the inode.
            if fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return set()
    owners = {pid for pid, inode in _socket_inodes(proc) if inode in inodes}
    return owners or None


def _socket_inodes(proc: Path):
    """(pid, socket inode) for every socket descriptor of every process we may look into."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except (FileNotFoundError, PermissionError, ProcessLookupError, NotADirectoryError):
            continue
        for fd in fds:
            try:
                target = fd.readlink().name
            except (FileNotFoundError, PermissionError, ProcessLookupError, OSError):
                continue
            if target.startswith("socket:["):
                yield int(entry.name), target[len("socket:[") : -1]
