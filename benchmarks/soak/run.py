"""`make soak`: memory and file descriptors of every process under a long steady load.

A real `pdctl serve` (its own database, runtime dir and ports in a temporary folder) runs the
demo deployment of `make run` (the stand-in MoRIIO 1P1D on the tiny model, each instance and
the proxy under its `pdctl run-instance` shim). Streamed completions go through the proxy at
8 req/s, bounded in count and time, while the RSS and open file descriptors of `pdctl serve`,
the proxy, every stand-in and every shim are read from /proc. The table gives each at the
start, after the warm-up and at the end, and its growth per 1,000 requests; the exit status
is 1 when, after the warm-up, any process grew by more than the bound (5 MB RSS or 10 fds
for the full run) or a request failed. `--quick` (CI, under 4 minutes) runs a shorter
warm-up and window with a tighter RSS bound, still well under what a leak of ~5 KB per
request would add in its window. Everything is on loopback; every process started is gone
at the end, whatever the exit path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.chaos.load import served
from benchmarks.soak.load import Tally, drive
from benchmarks.soak.procs import Series, find, kill_groups, sample, summarize, table
from harness.control_plane import ControlPlane
from harness.processes import finally_on_sigterm
from services.demo.deployments import DEMO_NAME

RATE = 8.0


@dataclass(frozen=True)
class Plan:
    minutes: float
    warm_s: float
    beat_s: float
    max_rss_mb: float
    max_fds: int

    @property
    def duration_s(self) -> float:
        return self.minutes * 60.0


def plan(minutes: float, quick: bool) -> Plan:
    if quick:
        # 120 s after a 50 s warm-up: 960 requests, so 3 MB is ~3 KB a request (a 5 KB one
        # adds 4.7 MB). pdctl serve still fills its 5-minute windows here (~1.5 MB in all).
        return Plan(minutes=170 / 60, warm_s=50.0, beat_s=5.0, max_rss_mb=3.0, max_fds=10)
    warm = min(300.0, minutes * 60.0 / 3)
    return Plan(minutes=minutes, warm_s=warm, beat_s=10.0, max_rss_mb=5.0, max_fds=10)


def start(plane: ControlPlane) -> str:
    """Start the demo deployment; the proxy's URL once it serves a completion."""
    status, body = plane.api("POST", f"/deployments/{DEMO_NAME}/start")
    if status not in (200, 202):
        raise RuntimeError(f"starting {DEMO_NAME} answered {status}: {body}")
    units = plane.running(DEMO_NAME, timeout=120)
    proxy = next(u for u in units.values() if u.get("role") == "proxy" or u["name"] == "proxy")
    url = proxy["url"]
    deadline = time.monotonic() + 60
    while not served(url):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the proxy at {url} never served a completion")
        time.sleep(0.5)
    return url


def stop(plane: ControlPlane) -> None:
    with contextlib.suppress(OSError, TimeoutError, KeyError, TypeError):
        plane.api("POST", f"/deployments/{DEMO_NAME}/stop")
        plane.wait(
            DEMO_NAME,
            lambda us: all(u["state"] in ("STOPPED", "EXITED", "FATAL") for u in us.values()),
            timeout=30,
        )


def run(tmp: Path, p: Plan) -> tuple[list[Series], Tally]:
    plane = ControlPlane(tmp, env={"PDCTL_DEMO": "1"})
    watched = []
    try:
        plane.start()
        url = start(plane)
        watched = find(plane.server.proc.pid, tmp / "runs")
        series = [Series(w) for w in watched]
        print(f"soak: {len(watched)} processes, load on {url}", file=sys.stderr, flush=True)

        def beat(t: float, tally: Tally) -> None:
            sample(series, t, tally.finished)
            if int(t) % 60 < p.beat_s:
                print(f"soak: {t:.0f} s, {tally.finished} done", file=sys.stderr, flush=True)

        count = int(RATE * p.duration_s)
        tally = asyncio.run(drive(url, RATE, count, p.duration_s, beat, p.beat_s))
        return series, tally
    finally:
        stop(plane)
        plane.close()
        kill_groups(watched)


def verdicts(rows, tally: Tally, p: Plan) -> list[str]:
    out = []
    for r in rows:
        if r.rss_growth_kb > p.max_rss_mb * 1024:
            out.append(f"{r.label} grew {r.rss_growth_kb / 1024:.1f} MB after warm-up")
        if r.fd_growth > p.max_fds:
            out.append(f"{r.label} opened {r.fd_growth:.0f} more fds after warm-up")
        if r.end.rss_kb is None:
            out.append(f"{r.label} is gone")
    if tally.failed or tally.skipped:
        out.append(f"{tally.failed} requests failed, {tally.skipped} skipped: {tally.errors}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the load")
    parser.add_argument("--quick", action="store_true", help="the short form CI runs")
    args = parser.parse_args()
    p = plan(args.minutes, args.quick)
    finally_on_sigterm()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pdctl-soak-") as tmp:
        series, tally = run(Path(tmp), p)
    rows = [r for r in (summarize(s, p.warm_s) for s in series) if r is not None]
    print(table(rows))
    print(
        f"\n{tally.sent} requests at {RATE:g} req/s over {p.duration_s / 60:.1f} min "
        f"({tally.ok} ok, {tally.failed} failed, {tally.skipped} skipped); warm-up "
        f"{p.warm_s:.0f} s; bound {p.max_rss_mb:g} MB / {p.max_fds} fds after it; "
        f"{time.monotonic() - began:.0f} s in all"
    )
    bad = verdicts(rows, tally, p)
    for line in bad:
        print(f"NOT: {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
