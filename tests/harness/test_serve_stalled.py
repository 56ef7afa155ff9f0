"""A call `pdctl serve` does not answer in time fails with every thread's stack in its
message (what a CI run keeps of a stall), not a bare socket timeout."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from harness.control_plane import ControlPlane, ServeStalled


def test_an_unanswered_call_carries_the_serves_stacks(tmp_path: Path):
    plane = ControlPlane(tmp_path).start()
    try:
        assert plane.api("GET", "/deployments")[0] == 200
        plane.read_timeout = 1.0
        pid = plane.server.proc.pid
        os.kill(pid, signal.SIGSTOP)  # takes the connection, answers nothing
        resume = threading.Timer(1.5, os.kill, (pid, signal.SIGCONT))
        resume.start()
        with pytest.raises(ServeStalled) as err:
            plane.status("anything")  # not taken for a server that is down
        resume.join()
        text = str(err.value)
        assert "GET /deployments/anything/status: no answer within 1 s" in text
        assert "most recent call first" in text  # faulthandler's stacks, from the log
        assert plane.api("GET", "/deployments")[0] == 200  # it goes on
    finally:
        plane.close()
