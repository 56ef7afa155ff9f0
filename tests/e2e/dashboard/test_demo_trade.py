"""`make run`'s demo under a real `pdctl serve` (PDCTL_DEMO=1, PDCTL_DEMO_TRADE=1) on a temporary
database: after a minute the frames show the trade (the colocated pair's p99 ITL at least 3x
the disaggregated one's, the disaggregated p99 TTFT higher); Ctrl-C says what keeps running;
the next serve adopts the pair and its load resumes. And Ctrl-C on any serve: what keeps
running and how to stop it, on stderr; nothing when nothing runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.control_plane import ControlPlane
from harness.demo_run import DEMO_ENV, frame, itl_ratio, trade, wait_filled
from harness.processes import ROOT, free_port, http_get, http_post, port_range, reap_instances
from services.demo.deployments import DEMO_NAME
from services.demo.trade import TRADE_NAMES
from tests.specs import colocated

pytestmark = pytest.mark.e2e
# The claim's margin: quiet runs give ~8x (vLLM's ITL buckets put the colocated spikes in
# (1 s, 2.5 s], the disaggregated gaps in (150, 300] ms); a loaded machine widens the
# disaggregated gaps' tail, so the test asks for the issue's 3x.
MIN_ITL_RATIO = 3.0


def sigint(plane: ControlPlane) -> str:
    """Ctrl-C the serve as a terminal does (its process group); its output."""
    plane.proc.kill(signal.SIGINT)
    return plane.proc.log_path.read_text()


@pytest.mark.live_window
@pytest.mark.timeout(300)
def test_demo_shows_the_trade_and_outlives_the_serve(tmp_path):
    plane = ControlPlane(tmp_path, env=DEMO_ENV)
    try:
        plane.start()
        wait_filled(plane, 60)
        colocated, disagg = trade(plane.proc.url)
        print(colocated.line(), disagg.line(), sep="\n")
        assert itl_ratio(colocated, disagg) >= MIN_ITL_RATIO, (colocated, disagg)
        assert disagg.ttft_p99 > colocated.ttft_p99, (colocated, disagg)
        assert colocated.attainment is not None and disagg.attainment is not None
        assert disagg.attainment > colocated.attainment  # the published split: ITL misses
        assert plane.status(DEMO_NAME) == {}  # the tiny demo is stored, never started
        pids = {name: {u: s["pid"] for u, s in plane.status(name).items()} for name in TRADE_NAMES}

        said = sigint(plane)
        assert "6 process(es) keep running" in said
        for name, units in pids.items():
            for unit, pid in units.items():
                assert f"{name}/{unit}  pid {pid}" in said
        assert f"--db {plane.db}` adopts them" in said and "pdctl stop NAME" in said
        assert "Traceback" not in said  # the load's requests end with the serve, quietly

        plane.start()  # the next `make run`: adopted, nothing stored again, load resumes
        for name, units in pids.items():
            assert {u: s["pid"] for u, s in plane.running(name).items()} == units
        names = [d["name"] for d in plane.api("GET", "/deployments")[1]]
        assert sorted(names) == sorted([DEMO_NAME, *TRADE_NAMES])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(frame(plane.proc.url, n, "10s")["proxy"]["in_flight"] > 0 for n in TRADE_NAMES):
                break
            time.sleep(1)
        else:
            pytest.fail("the load did not resume on the adopted pair")
    finally:
        plane.close()


def serve(tmp: Path, port: int) -> tuple[subprocess.Popen, Path, Path]:
    """A `pdctl serve` whose stdout and stderr are kept apart, once it answers."""
    out, err = tmp / "serve.out", tmp / "serve.err"
    env = {
        **os.environ,
        "PDCTL_RUNTIME_DIR": str(tmp / "runs"),
        "PDCTL_PORT_RANGE": port_range(),
        "PDCTL_SIM_REGISTRATION_INTERVAL": "0.3",
    }
    db = str(tmp / "pdctl.db")
    argv = [sys.executable, str(ROOT / "pdctl.py"), "serve", "--port", str(port), "--db", db]
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=o,
            stderr=e,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if http_get(f"http://127.0.0.1:{port}/health", timeout=1)[0] == 200:
                return proc, out, err
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise TimeoutError(err.read_text())


def interrupt(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)


@pytest.mark.timeout(120)
def test_ctrl_c_names_what_keeps_running_and_how_to_stop_it(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc, out, err = serve(tmp_path, port)
    try:
        assert http_post(url + "/api/deployments", colocated("kept"))[0] == 201
        assert http_post(url + "/api/deployments", colocated("idle"))[0] == 201  # stored only
        assert http_post(url + "/api/deployments/kept/start", {})[0] == 202
        deadline = time.monotonic() + 60
        units: list[dict] = []
        while time.monotonic() < deadline:
            units = json.loads(http_get(url + "/api/deployments/kept/status")[1])
            if units and all(u["state"] == "RUNNING" for u in units):
                break
            time.sleep(0.3)
        interrupt(proc)
        said = err.read_text()
        assert "2 process(es) keep running" in said
        for u in units:
            assert f"kept/{u['name']}  pid {u['pid']}, {u['url']}  RUNNING" in said
        assert "idle/" not in said and "keep running" not in out.read_text()
        assert f"`pdctl serve --db {tmp_path / 'pdctl.db'}` adopts them" in said
        assert "pdctl stop NAME   (NAME: kept;" in said
        assert f"curl -X POST {url}/api/deployments/NAME/stop" in said
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        reap_instances(tmp_path / "runs")


@pytest.mark.timeout(60)
def test_ctrl_c_says_nothing_when_nothing_runs(tmp_path):
    port = free_port()
    proc, _, err = serve(tmp_path, port)
    try:
        assert http_post(f"http://127.0.0.1:{port}/api/deployments", colocated("idle"))[0] == 201
        interrupt(proc)
        said = err.read_text()
        assert "Application shutdown complete" in said  # it did stop, and said only that
        assert "keep running" not in said and "pdctl stop" not in said
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
