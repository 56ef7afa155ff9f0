"""`pdctl serve` with a stand-in NIXL deployment: a websocket client sees the history first,
then frames whose TTFT count grows while requests flow, and the restart's event."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import pytest
from websockets.sync.client import connect

from harness.processes import http_post
from tests.e2e.serve.test_control_plane import ControlPlane
from tests.specs import nixl_1p1d

pytestmark = pytest.mark.e2e


def receive(ws, kind: str, timeout: float = 20.0, where=lambda m: True) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
        if message["type"] == kind and where(message):
            return message
    raise TimeoutError(kind)


def test_frames_fill_while_requests_flow_and_events_arrive(tmp_path) -> None:
    plane = ControlPlane(tmp_path).start()
    stop = threading.Event()
    try:
        status, created = plane.api("POST", "/deployments", nixl_1p1d())
        assert status == 201, created
        proxy = f"http://127.0.0.1:{created['ports']['proxy']}"
        assert plane.api("POST", "/deployments/pd/start")[0] == 202
        plane.running("pd")

        def load() -> None:
            while not stop.is_set():
                http_post(
                    proxy + "/v1/completions",
                    {"model": "tiny", "prompt": "a b c", "max_tokens": 4},
                    timeout=10,
                )
                time.sleep(0.05)

        ws_url = plane.proc.url.replace("http", "ws") + "/ws/deployments/pd?window=1m"
        with connect(ws_url, open_timeout=10) as ws:
            assert json.loads(ws.recv(timeout=10))["type"] == "history"
            first = receive(ws, "frame", where=lambda f: f["proxy"]["up"])
            threading.Thread(target=load, daemon=True).start()
            later = receive(
                ws, "frame", where=lambda f: f["ttft"]["count"] >= first["ttft"]["count"] + 5
            )
            assert later["ttft"]["p50"] is not None and later["request_rate"] > 0
            assert later["kv"]["source"] == "nixl" and later["simulated"] is True
            assert {i["name"] for i in later["instances"]} == {"prefill-0", "decode-0"}
            assert set(later["windows"]) == {"10s", "1m", "5m"}
            stop.set()
            assert plane.api("POST", "/deployments/pd/restart")[0] == 202
            event = receive(ws, "event", where=lambda e: e["kind"] == "deployment.restart")
            assert event["deployment"] == "pd"
    finally:
        stop.set()
        with contextlib.suppress(OSError, TimeoutError):
            plane.api("POST", "/deployments/pd/stop")
            plane.wait(
                "pd", lambda us: all(u["state"] in ("STOPPED", "EXITED") for u in us.values()), 30
            )
        plane.close()
