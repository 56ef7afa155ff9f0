"""The chaos row for a full log disk: a 1 MiB tmpfs is mounted over each instance's folder
(where its shim writes output.log and state.json), the instances are restarted onto it, and
under load the tmpfs is filled. The instances must keep serving (nothing fails), and the API
status and the dashboard page must say why the logs stopped; once space is freed the logs
resume. Needs root (`mount`); without it the row is skipped, saying so.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from pathlib import Path

from benchmarks.chaos.load import NAME, Row, Target, recovered, under_load, wait_for
from harness.processes import http_get

UNITS = ("prefill-0", "decode-0")
FULL = "No space left on device"


def fill(folder: Path) -> None:
    """Write a filler file until the disk refuses another byte."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 4096, 1):
            block = b"\0" * size
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, block)
    finally:
        os.close(fd)


def restart_instances(target: Target) -> float | None:
    """Restart prefill and decode through the API (they reopen their logs where their folder
    is now), and wait until the deployment serves again."""
    before = {u: target.plane.units()[u]["pid"] for u in UNITS}
    begin = time.monotonic()
    status, body = target.plane.api("POST", f"/deployments/{NAME}/restart")
    if status != 202:
        raise RuntimeError(f"restart answered {status}: {body}")
    wait_for(
        lambda: all(target.plane.units()[u]["pid"] not in (None, before[u]) for u in UNITS), 60
    )
    return recovered(target.plane, target.proxy_url, begin, 60)


def unmount(folder: Path) -> None:
    """Detach the tmpfs, carrying the live state file down to the real folder (the running
    instance keeps its open log until it exits; the supervisor must keep reading its pid)."""
    state = (folder / "state.json").read_bytes()
    subprocess.run(["umount", "-l", str(folder)], check=True, capture_output=True)
    tmp = folder / ".state.json.chaos.tmp"
    tmp.write_bytes(state)
    tmp.replace(folder / "state.json")


def log_errors(target: Target) -> dict[str, str | None]:
    units = target.plane.units()
    return {u: units[u].get("log_error") for u in UNITS}


def disk_full(target: Target) -> Row:
    row = Row(
        "log disk full", "keeps serving; status and page say why logs stopped", may_fail=False
    )
    folders = [target.plane.tmp / "runs" / NAME / unit for unit in UNITS]
    mounted: list[Path] = []
    try:
        for folder in folders:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                row.skipped = f"cannot mount a tmpfs ({done.stderr.strip()[:60]}): needs root"
                return row
            mounted.append(folder)
        if restart_instances(target) is None:
            row.check(False, "instances restarted onto the small disk")
            return row

        def inject(row: Row) -> None:
            for folder in folders:
                fill(folder)
            said = wait_for(
                lambda: all(FULL in (e or "") for e in log_errors(target).values()), 30, 0.2
            )
            if not row.check(
                said is not None, f"status says why logs stopped: {log_errors(target)}"
            ):
                return
            row.notes.append(f"status said '{log_errors(target)['decode-0']}' after {said:.1f} s")
            _, page = http_get(f"{target.plane.server.url}/deployments/{NAME}", timeout=10)
            row.check(
                page.decode().count(f"logs stopped: {FULL}") == len(UNITS),
                "the dashboard page says it for each instance",
            )
            time.sleep(2.0)  # serving on a full disk
            freed = time.monotonic()
            for folder in folders:
                (folder / "filler").unlink()
            resumed = wait_for(lambda: not any(log_errors(target).values()), 30, 0.2)
            if row.check(resumed is not None, "logs resume once space is freed"):
                row.recovery_s = time.monotonic() - freed
                row.notes.append("recovery = space freed to logs resumed")

        return under_load(target, row, inject, prompts=max(target.prompts, 100))
    except OSError as exc:
        row.check(exc.errno != errno.ENOSPC, f"chaos itself failed: {exc}")
        return row
    finally:
        for folder in mounted:
            unmount(folder)
        if mounted and restart_instances(target) is None:  # logs back on the real disk
            row.check(False, "instances restarted after unmounting")
