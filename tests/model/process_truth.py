"""Does a deployment's status tell the truth about its processes? Read from /proc: every
RUNNING row's pid is alive and listens on its port, and every process a shim runs under the
deployment's run dir is a row of the status (none the status does not show)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller.backends import procfs

STOPPED = ("STOPPED", "EXITED", "FATAL")


def mismatches(units: list[dict[str, Any]], run_dir: Path, proc: Path = procfs.PROC) -> list[str]:
    """Each way `units` (GET .../status) and the processes disagree; [] when they agree."""
    out = []
    rows = {u["name"]: u for u in units}
    for unit in units:
        if unit["state"] == "RUNNING":
            out += _running_row(unit, proc)
    for shim, name in shims(run_dir, proc):
        unit = rows.get(name)
        if unit is None:
            out.append(f"shim pid {shim} runs {name!r}, which the status does not show")
        elif unit["state"] in STOPPED:
            out.append(f"{name} is {unit['state']} in the status, but its shim (pid {shim}) runs")
        elif unit["state"] == "RUNNING" and unit["pid"] not in children(shim, proc):
            out.append(
                f"{name} is RUNNING as pid {unit['pid']}, but its shim (pid {shim}) runs "
                f"{sorted(children(shim, proc)) or 'nothing'}"
            )
    return out


def _running_row(unit: dict[str, Any], proc: Path) -> list[str]:
    name, pid = unit["name"], unit["pid"]
    if pid is None or procfs.start_time(pid, proc) is None:
        return [f"{name} is RUNNING as pid {pid}, which is not alive"]
    port = unit["ports"]["http"]
    holders = procfs.listening_pids(port, proc)
    if holders is not None and pid not in holders:
        return [f"{name} is RUNNING as pid {pid}, which does not listen on {port} ({holders})"]
    return []


def shims(run_dir: Path, proc: Path = procfs.PROC) -> list[tuple[int, str]]:
    """(pid, instance) of every live `pdctl run-instance` under `run_dir`."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        argv = procfs.command_line(int(entry.name), proc) or []
        if "run-instance" not in argv or procfs.start_time(int(entry.name), proc) is None:
            continue
        if _flag(argv, "--run-dir") == str(run_dir) and _flag(argv, "--name"):
            found.append((int(entry.name), str(_flag(argv, "--name"))))
    return sorted(found)


def children(pid: int, proc: Path = procfs.PROC) -> set[int]:
    """The live processes whose parent is `pid`."""
    out = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        rest = raw[raw.rindex(")") + 2 :].split()
        if rest[0] not in ("Z", "X") and int(rest[1]) == pid:
            out.add(int(entry.name))
    return out


def _flag(argv: list[str], name: str) -> str | None:
    """The value after `name` in `argv`, up to a `--` that ends the shim's own flags."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "--":
            return None
        if arg == name:
            return argv[i + 1]
    return None
