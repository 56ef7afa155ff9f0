"""The real process backend: `pdctl run-instance` started the way the supervisor starts it,
with secrets in our own environment."""

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

from controller.process_backend import ShimBackend

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(entry.split("=", 1) for entry in raw.decode().split("\0") if "=" in entry)


@pytest.fixture
def spawned():
    """Records the backend started; their process groups are killed at the end."""
    records = []
    yield records
    for record in records:
        for pid in (record.child_pid, record.shim_pid):
            with contextlib.suppress(ProcessLookupError, PermissionError, TypeError):
                os.killpg(pid, signal.SIGKILL)


def test_the_child_gets_a_minimal_environment_and_its_own_entries(tmp_path, monkeypatch, spawned):
    monkeypatch.setenv("PDCTL_OPERATOR_TOKENS", "alice:op-s3cret")
    monkeypatch.setenv("PDCTL_VIEWER_TOKENS", "bob:view-s3cret")
    monkeypatch.setenv("SOME_CLOUD_KEY", "k3y")
    backend = ShimBackend()
    record = asyncio.run(backend.spawn(tmp_path, "sleeper", SLEEPER, {"VLLM_MARK": "mine"}))
    spawned.append(record)
    for pid in (record.child_pid, record.shim_pid):
        env = environ(pid)
        assert env["VLLM_MARK"] == "mine" and env["PATH"] == os.environ["PATH"]
        assert not {"PDCTL_OPERATOR_TOKENS", "PDCTL_VIEWER_TOKENS", "SOME_CLOUD_KEY"} & set(env)
