"""Cross-origin protection: unsafe requests a browser makes from another origin are 403 saying
so (the API in JSON, the pages in HTML); same-origin browsers, curl and the CLI pass."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.specs import nixl_1p1d
from tests.web.conftest import AS_OPERATOR, OPERATOR, VIEWER, MakeClient
from web.security.csrf import WS_REFUSED, refusal

HOST = "testserver"  # what TestClient sends as Host
SAME_ORIGIN = {"Origin": f"http://{HOST}", "Sec-Fetch-Site": "same-origin"}
EVIL = "http://evil.example"
CROSS_SITE = {"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}


@pytest.mark.parametrize(
    ("method", "origin", "site", "refused"),
    [
        ("POST", None, None, False),  # curl, the CLI: nothing to go by
        ("POST", "http://h:8000", None, False),  # an older browser, same host:port
        ("POST", "http://H:8000", None, False),  # hosts compare without case
        ("POST", "http://h:8001", None, True),  # another port is another origin
        ("POST", "https://evil.example", None, True),
        ("POST", "null", None, True),  # sandboxed frames and privacy-sensitive redirects
        ("POST", "garbage", None, True),
        ("POST", None, "same-origin", False),
        ("POST", None, "none", False),  # typed into the address bar, a bookmark
        ("POST", "http://h:8000", "same-site", True),  # Sec-Fetch-Site wins over Origin
        ("POST", "http://h:8000", "cross-site", True),
        ("POST", "https://evil.example", "same-origin", False),  # trust the browser's word
        ("PUT", None, "cross-site", True),
        ("DELETE", "https://evil.example", None, True),
        ("PATCH", None, "cross-site", True),
        ("GET", "https://evil.example", "cross-site", False),  # safe methods always pass
        ("HEAD", None, "cross-site", False),
        ("OPTIONS", "https://evil.example", None, False),
        ("WEBSOCKET", "https://evil.example", None, True),  # the handshake carries the cookie
    ],
)
def test_refusal_follows_go_cross_origin_protection(
    method: str, origin: str | None, site: str | None, refused: bool
) -> None:
    why = refusal(method, "h:8000", origin, site)
    assert (why is not None) is refused
    if why is not None:
        assert why.startswith("cross-origin request refused")
        assert (origin or "(not sent)") in why


def test_trusted_origins_pass_even_cross_site() -> None:
    trusted = frozenset({"https://pdctl.example.com"})
    assert (
        refusal("POST", "internal:8000", "https://pdctl.example.com", "cross-site", trusted) is None
    )
    assert refusal("POST", "internal:8000", "https://other.example.com", None, trusted) is not None


@pytest.fixture
def signed_in(make_client: MakeClient) -> TestClient:
    """A browser signed in as the operator: its cookie is all it authenticates with."""
    client = make_client(operator_tokens=[OPERATOR], viewer_tokens=[VIEWER])
    response = client.post(
        "/login", data={"token": "op-secret"}, headers=SAME_ORIGIN, follow_redirects=False
    )
    assert response.status_code == 303
    return client


def test_a_cross_site_api_post_with_the_cookie_is_403_naming_the_origin(
    signed_in: TestClient,
) -> None:
    response = signed_in.post("/api/deployments", json=nixl_1p1d(), headers=CROSS_SITE)
    assert response.status_code == 403
    assert response.json() == {
        "detail": f"cross-origin request refused: origin {EVIL} is "
        "not this server (Sec-Fetch-Site: cross-site)"
    }
    assert signed_in.get("/api/deployments").json() == []  # nothing was created


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/api/deployments/pd"),
        ("DELETE", "/api/deployments/pd"),
        ("POST", "/api/deployments/pd/clone"),
    ],
)
def test_an_old_browser_sending_only_origin_is_refused_too(
    signed_in: TestClient, method: str, path: str
) -> None:
    assert signed_in.post("/api/deployments", json=nixl_1p1d()).status_code == 201
    response = signed_in.request(method, path, json=nixl_1p1d(), headers={"Origin": EVIL})
    assert response.status_code == 403
    assert response.json()["detail"] == (
        f"cross-origin request refused: origin {EVIL} is not this server ({HOST})"
    )
    assert signed_in.get("/api/deployments/pd").json()["revision"] == 1


def test_a_cross_site_form_post_gets_an_html_message(signed_in: TestClient) -> None:
    assert signed_in.post("/api/deployments", json=nixl_1p1d()).status_code == 201
    response = signed_in.post(
        "/deployments/pd/actions/stop", headers={**CROSS_SITE, "Accept": "text/html"}
    )
    assert response.status_code == 403
    assert response.headers["content-type"].startswith("text/html")
    assert "cross-origin request refused: origin http://evil.example" in response.text
    htmx = signed_in.post(
        "/deployments/pd/actions/stop", headers={**CROSS_SITE, "HX-Request": "true"}
    )
    assert htmx.status_code == 403 and htmx.text.startswith('<div id="notice" role="alert"')


def test_the_origin_is_escaped_in_the_html_message(signed_in: TestClient) -> None:
    response = signed_in.post(
        "/logout", headers={"Origin": "http://<script>x", "Accept": "text/html"}
    )
    assert response.status_code == 403
    assert "<script>" not in response.text and "&lt;script&gt;" in response.text


def test_login_csrf_a_foreign_form_cannot_sign_a_browser_in(secured: TestClient) -> None:
    response = secured.post(
        "/login", data={"token": "op-secret"}, headers=CROSS_SITE, follow_redirects=False
    )
    assert response.status_code == 403 and "set-cookie" not in response.headers
    assert "auth.login" not in [
        e["kind"] for e in secured.get("/api/events", headers=AS_OPERATOR).json()
    ]


def test_logout_from_another_site_is_refused(signed_in: TestClient) -> None:
    response = signed_in.post("/logout", headers=CROSS_SITE, follow_redirects=False)
    assert response.status_code == 403
    assert signed_in.get("/api/events").status_code == 200  # still signed in


def test_the_dashboard_own_forms_and_htmx_posts_pass(signed_in: TestClient) -> None:
    created = signed_in.post("/api/deployments", json=nixl_1p1d(), headers=SAME_ORIGIN)
    assert created.status_code == 201
    response = signed_in.post(
        "/deployments/pd/actions/stop", headers={**SAME_ORIGIN, "HX-Request": "true"}
    )
    assert response.status_code != 403
    older = signed_in.put(
        "/api/deployments/pd", json=nixl_1p1d(time_scale=2.0), headers={"Origin": f"http://{HOST}"}
    )
    assert older.status_code == 200 and older.json()["revision"] == 2
    typed = signed_in.post("/logout", headers={"Sec-Fetch-Site": "none"}, follow_redirects=False)
    assert typed.status_code == 303


def test_clients_without_browser_headers_pass(secured: TestClient) -> None:
    # curl and the CLI send a bearer token and neither Origin nor Sec-Fetch-Site.
    assert (
        secured.post("/api/deployments", json=nixl_1p1d(), headers=AS_OPERATOR).status_code == 201
    )


def test_reads_from_another_site_are_not_refused(signed_in: TestClient) -> None:
    # A cross-site GET cannot read the answer (no CORS) and changes nothing.
    assert signed_in.get("/api/deployments", headers=CROSS_SITE).status_code == 200


def test_a_trusted_origin_setting_lets_a_reverse_proxy_through(make_client: MakeClient) -> None:
    client = make_client(trusted_origins="https://pdctl.example.com, https://b.example")
    response = client.post(
        "/api/deployments",
        json=nixl_1p1d(),
        headers={"Origin": "https://pdctl.example.com", "Sec-Fetch-Site": "cross-site"},
    )
    assert response.status_code == 201
    assert (
        client.post("/api/deployments", json=nixl_1p1d("two"), headers={"Origin": EVIL}).status_code
        == 403
    )


def test_a_cross_origin_websocket_is_closed_4403(signed_in: TestClient) -> None:
    signed_in.post("/api/deployments", json=nixl_1p1d())
    with (
        pytest.raises(WebSocketDisconnect) as err,
        signed_in.websocket_connect("/ws/deployments/pd", headers={"Origin": EVIL}) as ws,
    ):
        ws.receive_text()
    assert err.value.code == WS_REFUSED
    assert err.value.reason.startswith(f"cross-origin request refused: origin {EVIL}")
    with signed_in.websocket_connect(
        "/ws/deployments/pd", headers={"Origin": f"http://{HOST}"}
    ) as ws:
        assert ws.receive_json()["type"] == "history"
