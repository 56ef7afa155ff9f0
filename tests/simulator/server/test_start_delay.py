"""The stand-in's modelled start: the parts it prints, and its port opening only after them."""

import socket
import subprocess
import sys
import time

import pytest

from harness.processes import ROOT, free_port
from simulator.config.engine import EngineSettings
from simulator.server.start_delay import modelled_start, wait_modelled_start


def test_the_wait_is_the_modelled_start_times_both_scales(capsys):
    waited = []
    settings = EngineSettings(start_time_scale=0.5, time_scale=2.0)
    delay = wait_modelled_start(settings, sleep=waited.append)
    assert delay == pytest.approx(modelled_start(settings).total_s) and waited == [delay]
    out = capsys.readouterr().out
    assert "modelled start" in out and "imports" in out and "compile" in out


def test_no_start_time_scale_means_no_wait():
    waited = []
    assert wait_modelled_start(EngineSettings(), sleep=waited.append) == 0 and waited == []


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_the_port_opens_after_the_scaled_modelled_start():
    port = free_port()
    # tiny on cpu: ~47 s modelled, x 0.02 = ~0.94 s
    argv = [sys.executable, str(ROOT / "pdctl.py"), "sim", "--port", str(port)]
    proc = subprocess.Popen(
        [*argv, "--start-time-scale", "0.02"], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        line = ""
        while "modelled start" not in line:
            line = proc.stdout.readline()
            assert line, "pdctl sim ended before saying its modelled start"
        said = time.monotonic()
        assert "port opens after 0.9" in line
        assert not _port_open(port)
        while not _port_open(port):
            assert time.monotonic() - said < 10, "the port never opened"
            time.sleep(0.02)
        assert time.monotonic() - said >= 0.85
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()
