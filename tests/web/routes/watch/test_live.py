"""The live websocket and the history API, in process: auth, limits, history first, events."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from state.history import History
from tests.specs import nixl_1p1d
from tests.web.conftest import AS_VIEWER, MakeClient


def close_code(client: TestClient, url: str) -> int:
    with pytest.raises(WebSocketDisconnect) as err, client.websocket_connect(url) as ws:
        ws.receive_text()
    return err.value.code


def test_tokens_are_required_when_configured(secured: TestClient) -> None:
    assert (
        secured.post(
            "/api/deployments", json=nixl_1p1d(), headers={"Authorization": "Bearer op-secret"}
        ).status_code
        == 201
    )
    assert close_code(secured, "/ws/deployments/pd") == 4401
    assert close_code(secured, "/ws/deployments/pd?token=wrong") == 4401
    with secured.websocket_connect("/ws/deployments/pd?token=view-secret") as ws:
        assert ws.receive_json()["type"] == "history"
    secured.cookies.set("pdctl_token", "view-secret")
    with secured.websocket_connect("/ws/deployments/pd") as ws:
        assert ws.receive_json()["type"] == "history"


def test_unknown_deployment_and_window_close_with_their_codes(client: TestClient) -> None:
    assert close_code(client, "/ws/deployments/nope") == 4404
    client.post("/api/deployments", json=nixl_1p1d())
    assert close_code(client, "/ws/deployments/pd?window=7m") == 4400


def test_too_many_websockets_close_with_try_again_later(make_client: MakeClient) -> None:
    client = make_client(max_websockets=1)
    client.post("/api/deployments", json=nixl_1p1d())
    with client.websocket_connect("/ws/deployments/pd") as first:
        assert first.receive_json()["type"] == "history"
        assert close_code(client, "/ws/deployments/pd") == 1013
    with client.websocket_connect("/ws/deployments/pd") as again:  # freed on close
        assert again.receive_json()["type"] == "history"


def test_history_first_then_events_as_they_are_recorded(make_client: MakeClient) -> None:
    client = make_client(scrape_interval=0.1)
    client.post("/api/deployments", json=nixl_1p1d())
    store = client.app.state.store
    History(store.engine).write(
        [
            ("pd", time.time() - 60, {"ts": 1.0, "ttft_p99": 0.2}),
            ("pd", time.time() - 7200, {"ts": 0.5}),
        ]
    )
    with client.websocket_connect("/ws/deployments/pd?window=10s") as ws:
        hello = ws.receive_json()
        assert hello["type"] == "history" and hello["points"] == [{"ts": 1.0, "ttft_p99": 0.2}]
        client.put("/api/deployments/pd", json=nixl_1p1d(time_scale=3.0))
        # Events arrive in order; the create may still be on its way when we connect.
        kinds = []
        while "deployment.updated" not in kinds and len(kinds) < 5:
            event = ws.receive_json()
            if event["type"] == "event":
                assert event["deployment"] == "pd"
                kinds.append(event["kind"])
        assert kinds[-1] == "deployment.updated"
        assert set(kinds) <= {"deployment.created", "deployment.updated"}


def test_history_api_reads_a_window_of_points(secured: TestClient) -> None:
    secured.post(
        "/api/deployments", json=nixl_1p1d(), headers={"Authorization": "Bearer op-secret"}
    )
    History(secured.app.state.store.engine).write(
        [("pd", time.time() - 30, {"ts": 2.0}), ("pd", time.time() - 600, {"ts": 1.0})]
    )
    body = secured.get("/api/deployments/pd/history?window=5m", headers=AS_VIEWER).json()
    assert body["points"] == [{"ts": 2.0}]
    assert (
        len(
            secured.get("/api/deployments/pd/history?window=1h", headers=AS_VIEWER).json()["points"]
        )
        == 2
    )
    assert (
        secured.get("/api/deployments/pd/history?window=soon", headers=AS_VIEWER).status_code == 422
    )
    assert secured.get("/api/deployments/pd/history").status_code == 401
    assert secured.get("/api/deployments/zz/history", headers=AS_VIEWER).status_code == 404
