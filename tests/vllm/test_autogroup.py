"""tests/vllm/autogroup.py: a marked process's session is lowered, nothing else's."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.vllm import harness
from tests.vllm.autogroup import lower

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not Path("/proc/self/autogroup").exists(), reason="a kernel without autogroups"
    ),
]


def _nice_of_session(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def _sleeper(env: dict[str, str], leader: str = "vllm.entrypoints") -> subprocess.Popen:
    """A session of its own, led by a process named like an engine (or `leader`)."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", leader],
        env={**os.environ, **env},
        start_new_session=True,
    )


def test_only_the_sessions_of_marked_processes_are_lowered():
    marker = uuid.uuid4().hex
    ours, other = _sleeper({harness.MARKER: marker}), _sleeper({harness.MARKER: "another"})
    # marked, but its session is led by something else (a Ray worker's holds Ray's own)
    ray = _sleeper({harness.MARKER: marker}, leader="ray::InstanceHost")
    try:
        assert lower(marker, 10) == 1
        assert (_nice_of_session(ours.pid), _nice_of_session(other.pid)) == (10, 0)
        assert _nice_of_session(ray.pid) == 0
        assert lower(marker, 10) == 0  # already lowered: nothing written again
    finally:
        for proc in (ours, other, ray):
            proc.kill()
            proc.wait()
