"""Is PD happening? A real `pdctl serve` runs a stand-in MoRIIO pair under load: the check is
silent while the decode receives its KV, catches the recompute fault within one window (10 s)
on /metrics, as one event and on the page, and says when it recovers. Observe shows MoRIIO's
own transfer figures, and the derived figure only for a MoRIIO that exports none."""

from __future__ import annotations

import contextlib
import time
import urllib.request

import pytest

from harness.control_plane import ControlPlane
from harness.processes import http_get, http_post, metric_value
from harness.stack import wait_until
from tests.e2e.serve.test_control_plane import bench, moriio

pytestmark = pytest.mark.e2e

WINDOW_S = 10.0  # observe/sections/pd_check.py CHECK_WINDOW


def gauge(plane: ControlPlane, name: str, **labels: str) -> float | None:
    _, raw = http_get(plane.proc.url + "/metrics")
    text = raw.decode()
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    if f"{name}{{{wanted}}}" not in text:
        return None
    return metric_value(text, name, **labels)


def pd_events(plane: ControlPlane, name: str) -> list[dict]:
    _, events = plane.api("GET", f"/events?deployment={name}&limit=100")
    return [e for e in events if e["kind"].startswith("pd.")]


def frame_kv(plane: ControlPlane, name: str) -> str | None:
    _, raw = http_get(plane.proc.url + "/metrics")
    text = raw.decode()
    for source in ("moriio", "nixl", "derived"):
        if f'pdctl_kv_transfer_bytes_per_second{{deployment="{name}",source="{source}"}}' in text:
            return source
    return None


def clear_fault(url: str) -> None:
    request = urllib.request.Request(url + "/_fault", method="DELETE")
    with urllib.request.urlopen(request, timeout=5):
        pass


@pytest.fixture
def plane(tmp_path):
    plane = ControlPlane(tmp_path)
    plane.env |= {"PDCTL_SIM_FAULT_INJECTION": "1"}
    plane.start()
    try:
        yield plane
    finally:
        for name in ("mori", "old"):
            with contextlib.suppress(OSError):
                plane.api("POST", f"/deployments/{name}/stop")
        with contextlib.suppress(TimeoutError):
            plane.wait("mori", lambda us: all(u["state"] != "RUNNING" for u in us.values()), 30)
        plane.close()


@pytest.mark.live_window
def test_recompute_is_caught_within_one_window_and_a_healthy_run_is_silent(plane, tmp_path):
    status, created = plane.api("POST", "/deployments", moriio("mori"))
    assert status == 201, created
    plane.api("POST", "/deployments/mori/start")
    units = plane.running("mori", timeout=60)
    decode = units["decode-0"]["url"]
    load = bench(created["ports"]["proxy"], tmp_path, "load", 6.0, 600)
    try:
        labels = {"deployment": "mori", "instance": "decode-0"}
        # Healthy: a full window of traffic judged, nearly every prompt token by transfer.
        wait_until(
            lambda: (gauge(plane, "pdctl_pd_transfer_share", **labels) or 0) > 0.9,
            30,
            "the decode's share judged healthy",
        )
        time.sleep(WINDOW_S)
        assert gauge(plane, "pdctl_pd_recomputing", **labels) == 0
        assert pd_events(plane, "mori") == []
        assert frame_kv(plane, "mori") == "moriio"  # the engine's own figures

        http_post(decode + "/_fault", {"fault": "recompute"})
        began = time.monotonic()
        wait_until(
            lambda: gauge(plane, "pdctl_pd_recomputing", **labels) == 1,
            WINDOW_S + 2,
            "the recomputing decode caught within one window",
        )
        detected_s = time.monotonic() - began
        print(f"recompute detected after {detected_s:.1f} s")
        assert detected_s <= WINDOW_S
        assert gauge(plane, "pdctl_pd_recomputing_since_seconds", **labels) <= time.time()
        _, page = http_get(plane.proc.url + "/deployments/mori")
        assert b'data-pd="recomputing"' in page and b"decode-0 recomputes its prompts" in page
        time.sleep(2)  # still recomputing: no second event for the same onset
        events = pd_events(plane, "mori")
        assert [e["kind"] for e in events] == ["pd.recomputing"], events
        assert "decode-0 recomputes its prompts" in events[0]["message"]

        clear_fault(decode)
        cleared = time.monotonic()
        wait_until(
            lambda: gauge(plane, "pdctl_pd_recomputing", **labels) == 0,
            WINDOW_S + 5,
            "the decode recovered",
        )
        print(f"recovery seen after {time.monotonic() - cleared:.1f} s")
        recovered = wait_until(lambda: len(pd_events(plane, "mori")) == 2, 5, "recovery event")
        assert recovered and pd_events(plane, "mori")[0]["kind"] == "pd.recovered"
    finally:
        load.kill()
        load.wait(10)


def test_older_moriio_that_exports_no_metrics_gets_the_derived_figure(plane):
    spec = moriio("old")
    spec["extra_args"] = ["--moriio-metrics", "none"]
    status, created = plane.api("POST", "/deployments", spec)
    assert status == 201, created
    plane.api("POST", "/deployments/old/start")
    plane.running("old", timeout=60)
    proxy = f"http://127.0.0.1:{created['ports']['proxy']}/v1/completions"
    body = {"model": "tiny", "prompt": "word " * 100, "max_tokens": 2, "ignore_eos": True}
    for _ in range(4):
        assert http_post(proxy, body)[0] == 200
    wait_until(lambda: frame_kv(plane, "old") == "derived", 10, "a derived KV figure")
