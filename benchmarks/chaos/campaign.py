"""`make chaos`: a fault campaign on real processes, each fault under a steady `pdctl bench` load.

A real `pdctl serve` runs a stand-in MoRIIO deployment (tiny model, 1 prefill + 1 decode +
proxy, each under its `pdctl run-instance` shim). Per fault: start the load, inject the fault
mid-load, time the recovery (every unit RUNNING and a completion through the proxy served),
then read every request the load sent. A request is *lost* when it never got an answer or an
error (the client timed out, or never recorded it), or got an error that does not say what
failed: that must be 0 in every row, and each row checks its own expected outcome. The rows
live in chaos_faults (processes), chaos_upstream (garbage, stalls), chaos_disk (a full log
disk), chaos_registry (heartbeats, modes, a flood) and chaos_canary (KV bytes corrupted on the
wire: the correctness canary must say so within one period). The summary table goes to stdout; the
exit status is 1 when a row's expectation does not hold. `--quick` runs a shorter campaign
(CI, about 4 minutes on 2 cores). `--layout 2p2d` runs two prefills and two decodes and the
rows of benchmarks/chaos/spares.py, where only requests already streaming may fail, and
benchmarks/chaos/ray.py's (a worker of a local Ray cluster lost; skipped without Ray).
`--layout 2p2d-defaults` runs benchmarks/chaos/defaults.py's: hangs behind a proxy with its
defaults, 240 requests each (about 5 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.chaos import canary as chaos_canary
from benchmarks.chaos import defaults as chaos_defaults
from benchmarks.chaos import disk as chaos_disk
from benchmarks.chaos import faults as chaos_faults
from benchmarks.chaos import ray as chaos_ray
from benchmarks.chaos import registry as chaos_registry
from benchmarks.chaos import spares as chaos_spares
from benchmarks.chaos import upstream as chaos_upstream
from benchmarks.chaos.load import (
    DEFAULTS,
    LAYOUTS,
    NAME,
    Plane,
    Row,
    Target,
    deployment,
    recovered,
)

ROWS: dict[str, Callable[[Target], Row]] = {
    **chaos_faults.ROWS,
    **chaos_upstream.ROWS,
    "log disk full": chaos_disk.disk_full,
    **chaos_registry.ROWS,
    **chaos_canary.ROWS,
}
QUICK = (
    "SIGKILL decode",
    "SIGKILL proxy",
    "SIGKILL serve",
    "SIGSTOP decode",
    "decode garbage",
    "decode stall",
    "log disk full",
    "heartbeats stop",
    "re-registers in the other mode",
    "malformed registration",
    "rogue registration",
    "registration flood",
    "registration flood at a proxy restart",
    "KV corrupted on the wire",
)
SPARES_ROWS = {**chaos_spares.ROWS, **chaos_ray.ROWS}  # the Ray row last: its own cluster
SPARES_QUICK = (*chaos_spares.QUICK, *chaos_ray.ROWS)


def campaign(tmp: Path, quick: bool, only: str | None = None, layout: str = "1p1d") -> list[Row]:
    plane = Plane(tmp, layout).start()
    rows: list[Row] = []
    spares = layout != "1p1d"
    table, short = (SPARES_ROWS, SPARES_QUICK) if spares else (ROWS, QUICK)
    if layout.endswith(DEFAULTS):
        table, short = chaos_defaults.ROWS, chaos_defaults.QUICK
    try:
        status, created = plane.api("POST", "/deployments", deployment(layout))
        if status != 201:
            raise RuntimeError(f"creating the deployment answered {status}: {created}")
        ports = created["ports"]
        target = Target(
            plane,
            f"http://127.0.0.1:{ports['proxy']}",
            ports["registry"],
            tmp,
            prompts=24 if quick else 60,
        )
        plane.api("POST", f"/deployments/{NAME}/start")
        if recovered(plane, target.proxy_url, time.monotonic(), 120) is None:
            raise RuntimeError(f"deployment never came up: {plane.units()}")
        wanted = [w.strip() for w in only.split(",")] if only else []

        def chosen(name: str) -> bool:
            return not wanted or any(w in name for w in wanted)

        names = [n for n in table if (not quick or n in short) and chosen(n)]
        for name in names:
            print(f"chaos: {name} ...", file=sys.stderr, flush=True)
            if spares:  # the last row's ejection over: each row starts with its spares
                chaos_spares.routable(target)
            started = time.monotonic()
            row = table[name](target)
            if spares and not row.skipped:  # the promise of a layout with spares
                row.check(
                    row.failed_clear + row.lost == row.streaming,
                    "only requests already streaming failed",
                )
            rows.append(row)
            print(f"chaos: {name}: {time.monotonic() - started:.0f} s", file=sys.stderr)
        if not spares and chosen("serve SIGKILL mid-write"):
            print("chaos: serve SIGKILL mid-write ...", file=sys.stderr, flush=True)
            rows.append(chaos_faults.kill_serve_mid_write(target))
    finally:
        with contextlib.suppress(OSError, AttributeError):
            plane.api("POST", f"/deployments/{NAME}/stop")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                u["state"] not in ("STOPPED", "EXITED") for u in plane.units().values()
            ):
                time.sleep(0.3)
        plane.close()
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| fault | expected | sent | completed | failed (clear error) | of them streaming "
        "| retried | lost | recovery s | ok | notes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        rec = "never" if r.recovery_s is None else f"{r.recovery_s:.1f}"
        ok = "skipped" if r.skipped else ("yes" if r.ok else "NO")
        notes = "; ".join([r.skipped] if r.skipped else r.notes).replace("|", "/")
        lines.append(
            f"| {r.fault} | {r.expected} | {r.sent} | {r.completed} | "
            f"{r.failed_clear} | {r.streaming} | {r.retried} | {r.lost} | "
            f"{rec if not r.skipped else '-'} | {ok} | "
            f"{notes} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer faults, shorter loads (CI)")
    parser.add_argument(
        "--layout", choices=sorted(LAYOUTS), default="1p1d", help="instances per role"
    )
    parser.add_argument(
        "--only", help="only the faults whose name contains one of these (comma-separated)"
    )
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pdctl-chaos-") as tmp:
        rows = campaign(Path(tmp), args.quick, args.only, args.layout)
    print(table(rows))
    failed = sum(not r.ok for r in rows if not r.skipped)
    skipped = sum(bool(r.skipped) for r in rows)
    print(
        f"\n{len(rows)} faults in {time.monotonic() - started:.0f} s; {failed} not as "
        f"expected" + (f"; {skipped} skipped" if skipped else "")
    )
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
