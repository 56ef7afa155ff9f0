"""The correctness canary with a real `pdctl serve` and a stand-in MoRIIO pair under load:
silent while the hand-off is right, the corrupt_kv fault caught within one canary period (an
event naming the pair and the first differing token, /metrics, the frame), canaries absent
from the proxy's SLO figures and the bench's records, and a forged canary header measured as
any request."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from harness.control_plane import ControlPlane
from harness.processes import http_get, http_post, metric_value
from harness.stack import wait_until
from tests.e2e.pd_checks import test_pd_happening
from tests.e2e.pd_checks.test_pd_happening import clear_fault, gauge
from tests.e2e.serve.test_control_plane import bench, bench_result, moriio

pytestmark = pytest.mark.e2e

PERIOD_S = 3.0
plane = test_pd_happening.plane  # the same control plane, fault injection on


def canary_events(plane: ControlPlane) -> list[dict]:
    _, events = plane.api("GET", "/events?deployment=mori&limit=100")
    return [e for e in events if e["kind"].startswith("canary.")]


def checks(plane: ControlPlane, result: str) -> float:
    return gauge(plane, "pdctl_canary_checks_total", deployment="mori", result=result) or 0


def proxy_metric(port: int, name: str, **labels: str) -> float:
    _, raw = http_get(f"http://127.0.0.1:{port}/metrics")
    return metric_value(raw.decode(), name, **labels)


@pytest.mark.live_window
def test_kv_corruption_is_caught_within_one_period_and_a_healthy_run_is_silent(plane, tmp_path):
    spec = moriio("mori") | {"canary": {"interval_s": PERIOD_S, "max_tokens": 16}}
    status, created = plane.api("POST", "/deployments", spec)
    assert status == 201, created
    plane.api("POST", "/deployments/mori/start")
    units = plane.running("mori", timeout=60)
    prefill, port = units["prefill-0"]["url"], created["ports"]["proxy"]
    load = bench(port, tmp_path, "load", 5.0, 60)
    try:
        # Healthy: canaries pass, no canary event, nothing failing.
        wait_until(lambda: checks(plane, "ok") >= 2, 4 * PERIOD_S + 5, "two canaries passed")
        assert checks(plane, "mismatch") == 0 and canary_events(plane) == []
        assert gauge(plane, "pdctl_canary_failing", deployment="mori") == 0

        http_post(prefill + "/_fault", {"fault": "corrupt_kv"})
        began, passed_before = time.monotonic(), checks(plane, "ok")
        wait_until(lambda: checks(plane, "mismatch") >= 1, 2 * PERIOD_S + 10, "the mismatch")
        detected_s = time.monotonic() - began
        print(f"KV corruption detected after {detected_s:.1f} s (period {PERIOD_S:g} s)")
        # Within one period, counted in probes rather than seconds (a loaded machine stretches
        # those): the first probe that started after the fault flagged it; at most one probe
        # already in flight, its KV moved before the fault, may have passed meanwhile.
        assert checks(plane, "ok") - passed_before <= 1
        assert gauge(plane, "pdctl_canary_failing", deployment="mori") == 1
        [event] = wait_until(lambda: canary_events(plane), 5, "the mismatch event")
        assert event["kind"] == "canary.mismatch"
        assert prefill in event["message"] and units["decode-0"]["url"] in event["message"]
        first = event["detail"]["first_difference"]
        assert first["index"] >= 0 and first["expected"] != first["got"]
        _, page = http_get(plane.proc.url + "/deployments/mori")  # beside the SLO figures
        assert b'data-canary="failing"' in page and b"canary FAILING since" in page
        time.sleep(PERIOD_S + 1)  # still corrupt: counted again, no second event
        assert checks(plane, "mismatch") >= 2 and len(canary_events(plane)) == 1

        clear_fault(prefill)
        wait_until(lambda: len(canary_events(plane)) == 2, 2 * PERIOD_S + 5, "recovered")
        assert canary_events(plane)[0]["kind"] == "canary.recovered"
        assert gauge(plane, "pdctl_canary_failing", deployment="mori") == 0
    finally:
        result = bench_result(load, tmp_path, "load")
    # Canaries are left out of the proxy's SLO figures and of the bench's records: the proxy
    # counted exactly the bench's requests (all served, corrupt answers are 200s).
    assert result["completed"] == 60 and result["failed"] == 0
    served = proxy_metric(port, "pdctl_proxy_requests_total", outcome="ok")
    canaries = proxy_metric(port, "pdctl_proxy_canary_requests_total", verdict="ok")
    assert served == 60 and canaries >= 4


def test_a_forged_canary_header_is_measured_as_any_request(plane):
    spec = moriio("mori") | {"canary": {"interval_s": 0}}  # off: no real canary meanwhile
    status, created = plane.api("POST", "/deployments", spec)
    assert status == 201, created
    plane.api("POST", "/deployments/mori/start")
    plane.running("mori", timeout=60)
    port = created["ports"]["proxy"]
    body = {"model": "tiny", "prompt": "a b c d", "max_tokens": 4, "ignore_eos": True}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Pdctl-Canary": "1"},
    )
    with urllib.request.urlopen(request, timeout=20) as resp:
        assert resp.status == 200 and "X-Pdctl-Decode" not in resp.headers
    assert proxy_metric(port, "pdctl_proxy_requests_total", outcome="ok") == 1
    assert proxy_metric(port, "pdctl_proxy_canary_requests_total", verdict="forged") == 1
    time.sleep(1.5)
    assert checks(plane, "ok") == 0 and canary_events(plane) == []
