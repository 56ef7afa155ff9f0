"""Running the real operator verbs in tests: `pdctl VERB ...` as a subprocess with a clean
environment (no PDCTL_* of the caller's, no config file unless given), and the specs and
tokens the verb tests use."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness.processes import ROOT

OPERATOR_SECRET, VIEWER_SECRET = "op-secret", "view-secret"
TOKENS = {
    "PDCTL_OPERATOR_TOKENS": f"alice:{OPERATOR_SECRET}",
    "PDCTL_VIEWER_TOKENS": f"bob:{VIEWER_SECRET}",
}
MORIIO_YAML = """\
name: {name}
engine: sim
model: tiny
topology: disaggregated
connector: MoRIIOConnector
prefix_caching: false
groups:
  - {{name: prefill, role: prefill, mode: read}}
  - {{name: decode, role: decode, mode: read}}
proxy: {{hold_queue: 256, hold_deadline_s: 60}}
"""


def environment(token: str | None, config: Path | None, server: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDCTL_")}
    env["PDCTL_CONFIG"] = str(config or ROOT / "no-such-pdctl-config.toml")
    if token is not None:
        env["PDCTL_TOKEN"] = token
    if server is not None:
        env["PDCTL_SERVER"] = server
    return env


def argv(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "pdctl.py"), *args]


def pdctl(
    *args: str,
    token: str | None = OPERATOR_SECRET,
    server: str | None = None,
    config: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv(*args),
        capture_output=True,
        text=True,
        env=environment(token, config, server),
        timeout=timeout,
        cwd=ROOT,
    )


class Follower:
    """A verb left running (events --follow): its stdout lines as they come, bounded waits."""

    def __init__(self, *args: str, server: str, token: str | None = OPERATOR_SECRET) -> None:
        self.proc = subprocess.Popen(
            argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(token, None, server),
            cwd=ROOT,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return line
        raise TimeoutError(f"{text!r} not followed within {timeout} s; saw {self.seen}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
