"""The Host allowlist of a control plane without tokens (web/security/hosts.py): the names, and the
refusal of plain requests and websockets (issue 13, finding 10)."""

from __future__ import annotations

import pytest
from starlette.websockets import WebSocketDisconnect

from tests.specs import nixl_1p1d
from tests.web.conftest import OPERATOR, MakeClient
from web.security.hosts import WS_REFUSED, allowed_names, refusal

LOOPBACK = allowed_names("127.0.0.1", [])
REBIND = {
    "Host": "rebind.example:8000",
    "Origin": "http://rebind.example:8000",
    "Sec-Fetch-Site": "same-origin",
}


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8000", "127.0.0.1", "localhost:1", "LOCALHOST", "[::1]:8000", "localhost."]
)
def test_loopback_names_pass_with_any_port(host: str) -> None:
    assert refusal(host, LOOPBACK) is None


@pytest.mark.parametrize(
    "host",
    ["rebind.example:8000", "evil.localhost", "127.0.0.1.evil:80", "localhost.evil", "", None],
)
def test_other_names_are_refused_saying_why(host: str | None) -> None:
    why = refusal(host, LOOPBACK)
    assert why is not None and ("PDCTL_ALLOWED_HOSTS" in why or "required" in why)


def test_the_bound_address_and_configured_names_pass() -> None:
    allowed = allowed_names("::1", ["pdctl.internal", "other.example:9000"])
    for host in ("[::1]:80", "pdctl.internal:8000", "other.example"):
        assert refusal(host, allowed) is None
    assert refusal("anything", allowed_names("127.0.0.1", ["*"])) is None


def test_a_rebinding_request_cannot_create_a_deployment(make_client: MakeClient) -> None:
    client = make_client(allowed_hosts=[])
    response = client.post("/api/deployments", json=nixl_1p1d(), headers=REBIND)
    assert response.status_code == 400
    assert "rebind.example:8000 is not a name" in response.json()["detail"]
    page = client.get("/", headers={**REBIND, "Accept": "text/html"})
    assert page.status_code == 400 and "rebind.example" in page.text
    assert client.get("/api/deployments", headers={"Host": "127.0.0.1:8000"}).json() == []


def test_a_websocket_with_a_foreign_host_is_closed_4421(make_client: MakeClient) -> None:
    client = make_client(allowed_hosts=[])  # TestClient's websockets say Host: testserver
    with (
        pytest.raises(WebSocketDisconnect) as err,
        client.websocket_connect("/ws/deployments/pd") as ws,
    ):
        ws.receive_text()
    assert err.value.code == WS_REFUSED and "testserver" in err.value.reason


def test_with_tokens_the_tokens_protect_and_any_host_is_answered(make_client) -> None:
    client = make_client(allowed_hosts=[], operator_tokens=[OPERATOR])
    response = client.get("/api/deployments", headers={"Host": "pdctl.example.com"})
    assert response.status_code == 401  # asked for a token, not refused for its Host
