"""The dashboard's load button starts `pdctl bench` as a child of the control plane: a real one,
with the minimal environment every child gets, never the control plane's tokens."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from harness.processes import free_port
from services.load import LoadRuns


def environ(pid: int, timeout: float = 5.0) -> dict[str, str]:
    """/proc/PID/environ, once the kernel has set it up (just after exec)."""
    deadline = time.monotonic() + timeout
    while True:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
        if raw or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return dict(e.split("=", 1) for e in raw.decode(errors="replace").split("\0") if "=" in e)


def test_a_load_run_does_not_inherit_the_control_planes_tokens(monkeypatch):
    monkeypatch.setenv("PDCTL_OPERATOR_TOKENS", "ops:op-Zq81-secret")
    monkeypatch.setenv("PDCTL_VIEWER_TOKENS", "viewer:view-Xy27-secret")

    async def scenario() -> dict[str, str]:
        runs = LoadRuns()
        run = await runs.start("x", f"http://127.0.0.1:{free_port()}", 1.0, 30.0, None, None)
        try:
            return await asyncio.to_thread(environ, run.proc.pid)
        finally:
            await runs.stop("x")
            await run.proc.wait()
            await asyncio.sleep(0.1)  # its watcher reaps it

    env = asyncio.run(scenario())
    assert env["PATH"] == os.environ["PATH"]
    assert not {"PDCTL_OPERATOR_TOKENS", "PDCTL_VIEWER_TOKENS"} & set(env)
