"""What the soak watches: every process of a control plane and its deployment, their RSS and
open file descriptors read from /proc, and the table of how they moved.

Processes are found the way the controller knows them: `pdctl serve` by the pid we started,
each unit's shim (`pdctl run-instance`) and child (stand-in or proxy) from the state file the
shim keeps under the runtime dir. The /proc root is a parameter, so tests can point it
elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from controller.backends import procfs

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass(frozen=True, slots=True)
class Watched:
    """One process: what it is (`serve`, `proxy shim`, `prefill-0` ...) and its pid."""

    label: str
    pid: int
    started: int | None = None  # clock ticks since boot: tells a reused pid apart


@dataclass(slots=True)
class Sample:
    at_s: float  # seconds since the load began
    requests: int  # requests finished by then
    rss_kb: int | None  # None: the process is gone
    fds: int | None


@dataclass(slots=True)
class Series:
    proc: Watched
    samples: list[Sample] = field(default_factory=list)


def find(serve_pid: int, runtime_dir: Path) -> list[Watched]:
    """`pdctl serve`, then each unit's shim and child, from the shims' state files."""
    found = [Watched("pdctl serve", serve_pid, procfs.start_time(serve_pid))]
    for state_file in sorted(runtime_dir.glob("*/*/state.json")):
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue
        unit = state_file.parent.name
        for label, key in ((unit, "child_pid"), (f"{unit} shim", "shim_pid")):
            if pid := state.get(key):
                found.append(Watched(label, int(pid), procfs.start_time(int(pid))))
    return found


def rss_kb(pid: int, proc: Path = Path("/proc")) -> int | None:
    """Resident set size in KiB (statm's second field), None when the process is gone."""
    try:
        fields = (proc / str(pid) / "statm").read_text().split()
    except OSError:
        return None
    return int(fields[1]) * PAGE_KB


def open_fds(pid: int, proc: Path = Path("/proc")) -> int | None:
    try:
        return len(os.listdir(proc / str(pid) / "fd"))
    except OSError:
        return None


def sample(series: list[Series], at_s: float, requests: int, proc: Path = Path("/proc")) -> None:
    for s in series:
        pid = s.proc.pid
        s.samples.append(Sample(at_s, requests, rss_kb(pid, proc), open_fds(pid, proc)))


def kill_groups(watched: list[Watched], proc: Path = Path("/proc")) -> int:
    """SIGKILL the process group of every watched process still alive; how many. A pid
    now held by another process (another start time) is left alone."""
    killed = 0
    for w in watched:
        if w.started is None or procfs.start_time(w.pid, proc) != w.started:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(w.pid), signal.SIGKILL)
            killed += 1
    return killed


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    pid: int
    start: Sample
    warm: Sample
    end: Sample
    rss_growth_kb: float  # after warm-up
    fd_growth: float
    rss_kb_per_1k: float | None
    fds_per_1k: float | None


def _steady(samples: list[Sample], attr: str) -> float | None:
    """The median of a few neighbouring samples: one allocator burst is not growth."""
    values = [getattr(s, attr) for s in samples if getattr(s, attr) is not None]
    return statistics.median(values) if values else None


def summarize(s: Series, warm_s: float, around: int = 3) -> Row | None:
    """Start, end of warm-up and end of one process's series, and its growth after warm-up."""
    alive = [x for x in s.samples if x.rss_kb is not None]
    if len(alive) < 2:
        return None
    after = [x for x in alive if x.at_s >= warm_s] or alive[-1:]
    warm_i = alive.index(after[0])
    warm_set, end_set = alive[warm_i : warm_i + around], alive[-around:]
    rss = (_steady(end_set, "rss_kb") or 0) - (_steady(warm_set, "rss_kb") or 0)
    fds = (_steady(end_set, "fds") or 0) - (_steady(warm_set, "fds") or 0)
    served = alive[-1].requests - alive[warm_i].requests
    per = 1000.0 / served if served > 0 else None
    return Row(
        s.proc.label,
        s.proc.pid,
        alive[0],
        alive[warm_i],
        alive[-1],
        rss,
        fds,
        rss * per if per else None,
        fds * per if per else None,
    )


def _mb(kb: float | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.1f}"


def table(rows: list[Row]) -> str:
    lines = [
        "| process | pid | RSS MB start | after warm-up | end | growth MB | KB / 1k req "
        "| fds start | after warm-up | end | fds / 1k req |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        per_kb = "-" if r.rss_kb_per_1k is None else f"{r.rss_kb_per_1k:.0f}"
        per_fd = "-" if r.fds_per_1k is None else f"{r.fds_per_1k:.2f}"
        lines.append(
            f"| {r.label} | {r.pid} | {_mb(r.start.rss_kb)} | {_mb(r.warm.rss_kb)} "
            f"| {_mb(r.end.rss_kb)} | {r.rss_growth_kb / 1024:+.2f} | {per_kb} "
            f"| {r.start.fds} | {r.warm.fds} | {r.end.fds} | {per_fd} |"
        )
    return "\n".join(lines)
