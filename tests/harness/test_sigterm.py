"""A benchmark stopped by SIGTERM (`timeout`, CI's kill) still runs its `finally` blocks."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.processes import ROOT

SCRIPT = """
import sys, time
from harness.processes import finally_on_sigterm
finally_on_sigterm()
try:
    print("ready", flush=True)
    time.sleep(60)
finally:
    open(sys.argv[1], "w").write("stopped what it started")
"""


def test_sigterm_runs_the_finally_blocks_and_exits_143(tmp_path: Path) -> None:
    marker = tmp_path / "cleaned"
    with subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(marker)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 5
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.read_text() == "stopped what it started"
