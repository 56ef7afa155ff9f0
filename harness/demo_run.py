"""`make run`'s demo under a real `pdctl serve` on a temporary database, for the demo's tests,
its screenshots (harness/demo_screens.py) and its figures: the live frames of the trade pair,
the claim they make, and the CPU the whole demo takes (the serve, every shim, engine and
proxy it started, and the load it offers).

`python -m harness.demo_run [--seconds 60]` starts it, waits until the pair runs and then
`--seconds` more, prints both deployments' 1 min figures and the demo's CPU, and stops
everything it started."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from harness.control_plane import ControlPlane
from services.demo.trade import COLOCATED_NAME, DISAGG_NAME, TRADE_NAMES

DEMO_ENV = {"PDCTL_DEMO": "1", "PDCTL_DEMO_TRADE": "1"}
TICKS = os.sysconf("SC_CLK_TCK")


async def _frame(base_url: str, name: str, window: str) -> dict[str, Any]:
    url = base_url.replace("http://", "ws://") + f"/ws/deployments/{name}?window={window}"
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        async with asyncio.timeout(10):
            async for message in ws:
                data = json.loads(message.data)
                if data.get("type") == "frame":
                    return data
    raise TimeoutError(f"no frame for {name} on {url}")


def frame(base_url: str, name: str, window: str = "1m") -> dict[str, Any]:
    """The deployment's latest live frame, as the dashboard receives it."""
    return asyncio.run(_frame(base_url, name, window))


@dataclass(frozen=True)
class Figures:
    """One deployment's client-side figures over a frame's window (ms; counts)."""

    name: str
    requests: float
    ttft_p50: float
    ttft_p90: float
    ttft_p99: float
    itl_p50: float
    itl_p99: float
    attainment: float | None

    @classmethod
    def of(cls, frame: dict[str, Any]) -> Figures:
        ttft, itl = frame["ttft"], frame["itl"]
        p50, p90, p99 = (1000 * (ttft[k] or 0.0) for k in ("p50", "p90", "p99"))
        return cls(
            frame["deployment"],
            ttft["count"],
            p50,
            p90,
            p99,
            1000 * (itl["p50"] or 0.0),
            1000 * (itl["p99"] or 0.0),
            frame["slo_attainment"],
        )

    def line(self) -> str:
        return (
            f"{self.name}: {self.requests:.0f} requests; TTFT p50/p90/p99 {self.ttft_p50:.0f} / "
            f"{self.ttft_p90:.0f} / {self.ttft_p99:.0f} ms; ITL p50/p99 {self.itl_p50:.0f} / "
            f"{self.itl_p99:.0f} ms; attainment {self.attainment}"
        )


def itl_ratio(colocated: Figures, disagg: Figures) -> float:
    return colocated.itl_p99 / disagg.itl_p99 if disagg.itl_p99 else float("inf")


def trade(base_url: str) -> tuple[Figures, Figures]:
    """The pair's figures over the 1 min window: colocated, disaggregated."""
    return Figures.of(frame(base_url, COLOCATED_NAME)), Figures.of(frame(base_url, DISAGG_NAME))


def trade_lines(base_url: str) -> list[str]:
    """The pair's figures and the claim's ratio, for a person."""
    colocated, disagg = trade(base_url)
    ratio = itl_ratio(colocated, disagg)
    return [colocated.line(), disagg.line(), f"p99 ITL colocated / disaggregated: {ratio:.1f}x"]


def wait_filled(plane: ControlPlane, seconds: float, min_requests: int = 10) -> None:
    """Wait until both of the pair run, then `seconds` more and until each 1 min window holds
    `min_requests` finished requests (at most 60 s longer)."""
    for name in TRADE_NAMES:
        plane.running(name, timeout=120)
    time.sleep(seconds)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if min(f.requests for f in trade(plane.server.url)) >= min_requests:
            return
        time.sleep(2)


def demo_pids(plane: ControlPlane) -> list[int]:
    """The serve and every shim and process its deployments run (their state files)."""
    pids = [plane.server.proc.pid]
    for state_file in (plane.tmp / "runs").glob("*/*/state.json"):
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue
        pids += [state[k] for k in ("child_pid", "shim_pid") if isinstance(state.get(k), int)]
    return pids


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU the live ones of `pids` used so far."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def cpu_share(plane: ControlPlane, seconds: float) -> tuple[float, float]:
    """Cores the whole demo, and the serve alone (with the load it offers), used on average
    over the next `seconds`."""
    pids = demo_pids(plane)
    serve = pids[:1]
    before, own, start = cpu_seconds(pids), cpu_seconds(serve), time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - start
    return (cpu_seconds(pids) - before) / elapsed, (cpu_seconds(serve) - own) / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--cpu-seconds", type=float, default=30.0)
    args = parser.parse_args()
    plane = ControlPlane(Path(tempfile.mkdtemp(prefix="pdctl-demo-")), env=DEMO_ENV)
    try:
        plane.start()
        started = time.monotonic()
        wait_filled(plane, args.seconds)
        print(f"after {time.monotonic() - started:.0f} s:")
        print("\n".join(trade_lines(plane.server.url)))
        share, serve = cpu_share(plane, args.cpu_seconds)
        print(
            f"CPU over {args.cpu_seconds:g} s: {share:.3f} cores for the whole demo "
            f"({len(demo_pids(plane))} processes), of which pdctl serve with its load {serve:.3f}"
        )
    finally:
        plane.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
