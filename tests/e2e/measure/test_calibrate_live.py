"""Calibration from a deployment's own traffic, end to end: `pdctl serve` runs a stand-in 1P1D
(Llama-3.1-8B on H100 timing), `pdctl bench` sends it traffic through its proxy, then
`pdctl calibrate --deployment` fits the proxy's logged requests (POST .../calibration
{"source": "live"}): the profile is kept for the deployment and its error on the requests it
did not fit is reported. ~40 s: `make test-calibrate`, not `make test`."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

import pytest

from harness.control_plane import ControlPlane
from harness.processes import run_pdctl

pytestmark = [pytest.mark.e2e, pytest.mark.calibrate, pytest.mark.timeout(240)]

MODEL = "llama-3.1-8b"
SPEC = {
    "name": "live",
    "engine": "sim",
    "model": MODEL,
    "hardware": "h100",
    "topology": "disaggregated",
    "connector": "NixlConnector",
    "prefix_caching": False,
    "groups": [{"name": "prefill", "role": "prefill"}, {"name": "decode", "role": "decode"}],
}


def _pdctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = run_pdctl(*args)
    assert not check or done.returncode == 0, done.stderr
    return done


@pytest.fixture
def plane(tmp_path: Path):
    plane = ControlPlane(tmp_path).start()
    try:
        yield plane
    finally:
        with contextlib.suppress(OSError):
            plane.api("POST", "/deployments/live/stop")
        plane.close()


def test_a_running_deployment_is_calibrated_on_its_own_traffic(plane, tmp_path: Path) -> None:
    status, created = plane.api("POST", "/deployments", SPEC)
    assert status == 201, created
    server = ["--server", plane.server.url]
    # Not started: its proxy has no log to read, and the CLI says so by its flag.
    refused = _pdctl("calibrate", "--deployment", "live", *server, check=False)
    assert refused.returncode != 0 and "--deployment" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    plane.api("POST", "/deployments/live/start")
    plane.running("live")
    proxy = f"http://127.0.0.1:{created['ports']['proxy']}"
    _pdctl(
        "bench", "--base-url", proxy, "--model", MODEL, "--request-rate", "6",
        "--num-prompts", "90", "--input-len", "1024", "--output-len", "48",
        "--range-ratio", "0.5", "--seed", "7", "--quiet", "--timeout", "60",
        "--result-json", str(tmp_path / "load.json"),
    )  # fmt: skip
    done = _pdctl("calibrate", "--deployment", "live", *server, "--json")
    report = json.loads(done.stdout)
    print(json.dumps(report, indent=1))
    assert report["requests"] >= 80 and report["without_usage"] == 0
    assert report["held_out"].startswith("every 5th request")
    calibrated = report["calibrated"]
    assert calibrated["itl_mape"] < 0.15 and calibrated["ttft_mape"] < 0.3, calibrated
    status, kept = plane.api("GET", "/deployments/live/calibration")
    assert status == 200 and kept["profile"]["source"] == "the live traffic of live"
    assert kept["profile"]["tp"] == 1 and kept["profile"]["handoff"] is not None
    # The readable form names where the profile came from and its error.
    shown = _pdctl("calibrate", "--deployment", "live", *server).stdout
    assert "the live traffic of live" in shown and "Error on every 5th request" in shown
