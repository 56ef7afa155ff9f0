"""What the attach tests read of a control plane watching a deployment it did not start: its
live frame over the websocket, its events, and `pdctl bench --deployment` run at it."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.control_plane import ControlPlane
from harness.demo_run import frame as live_frame
from harness.processes import ROOT
from tests.terminal.verbs_run import environment


def frame(plane: ControlPlane, name: str, window: str = "1m") -> dict[str, Any]:
    """The first frame the live websocket pushes for `name` in `window`."""
    return live_frame(plane.server.url, name, window)


def events(plane: ControlPlane, name: str, kind: str) -> list[dict[str, Any]]:
    _, found = plane.api("GET", f"/events?deployment={name}&limit=200")
    return [e for e in found if e["kind"] == kind]


def at(event: dict[str, Any]) -> float:
    """An event's time, as a Unix timestamp."""
    return datetime.fromisoformat(event["ts"]).timestamp()


def bench_deployment(tmp: Path, server: str, name: str, load: tuple[str, ...]) -> dict[str, Any]:
    """`pdctl bench --deployment NAME`: the load goes to the attached deployment's proxy; its
    result JSON."""
    out = tmp / "bench.json"
    done = subprocess.run(
        [
            sys.executable, str(ROOT / "pdctl.py"), "bench", "--deployment", name,
            "--server", server, "--result-json", str(out), "--quiet", "--model", "tiny", *load,
        ],
        cwd=ROOT, capture_output=True, timeout=90, check=False, env=environment(None, None, None),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(out.read_text())


def within(got: float, want: float, share: float = 0.15) -> bool:
    return abs(got - want) <= share * want
