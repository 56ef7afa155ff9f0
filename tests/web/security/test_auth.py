"""Tokens for two roles: 401 without one, 403 for a viewer changing anything, the actor in
every event, and the browser's cookie through /login."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.specs import nixl_1p1d
from tests.web.conftest import AS_OPERATOR, AS_VIEWER, OPERATOR, VIEWER, MakeClient
from web.security.auth import COOKIE, Role, TokenBook, bearer, is_loopback
from web.settings import Settings

CHANGES = [
    ("POST", "/api/deployments", nixl_1p1d("other")),
    ("PUT", "/api/deployments/pd", nixl_1p1d()),
    ("DELETE", "/api/deployments/pd", None),
    ("POST", "/api/deployments/pd/clone", {"name": "pd2"}),
]
READS = [
    "/api/deployments",
    "/api/deployments/pd",
    "/api/deployments/pd/revisions",
    "/api/deployments/pd/revisions/1",
    "/api/deployments/pd/diff?from=1&to=1",
    "/api/events",
    "/metrics",
]


@pytest.fixture(scope="module")
def with_pd(make_module_client: MakeClient) -> TestClient:
    """Shared by the tests that change nothing (every change they try is refused)."""
    client = make_module_client(operator_tokens=[OPERATOR], viewer_tokens=[VIEWER])
    assert client.post("/api/deployments", json=nixl_1p1d(), headers=AS_OPERATOR).status_code == 201
    return client


@pytest.mark.parametrize("path", READS)
@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic b3A6b3A="}]
)
def test_every_read_needs_a_known_token(with_pd: TestClient, path: str, headers: dict) -> None:
    response = with_pd.get(path, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "token" in response.json()["detail"]


@pytest.mark.parametrize("path", READS)
def test_a_viewer_reads_everything(with_pd: TestClient, path: str) -> None:
    assert with_pd.get(path, headers=AS_VIEWER).status_code == 200


@pytest.mark.parametrize(("method", "path", "body"), CHANGES)
def test_a_viewer_changing_anything_is_403(
    with_pd: TestClient, method: str, path: str, body: dict | None
) -> None:
    response = with_pd.request(method, path, json=body, headers=AS_VIEWER)
    assert response.status_code == 403
    assert response.json() == {"detail": "viewer:bob may only read; changes need an operator token"}


@pytest.mark.parametrize(("method", "path", "body"), CHANGES)
def test_changes_without_a_token_are_401(
    with_pd: TestClient, method: str, path: str, body: dict | None
) -> None:
    assert with_pd.request(method, path, json=body).status_code == 401


def test_health_stays_open(secured: TestClient) -> None:
    assert secured.get("/health").json() == {"status": "ok"}


def test_events_name_the_operator(secured: TestClient) -> None:
    secured.post("/api/deployments", json=nixl_1p1d(), headers=AS_OPERATOR)
    secured.put("/api/deployments/pd", json=nixl_1p1d(time_scale=3.0), headers=AS_OPERATOR)
    events = secured.get("/api/events", headers=AS_VIEWER).json()
    assert {e["actor"] for e in events} == {"operator:alice"}
    revision = secured.get("/api/deployments/pd/revisions/2", headers=AS_VIEWER).json()
    assert revision["actor"] == "operator:alice"


def test_login_sets_an_httponly_strict_cookie_that_authenticates(secured: TestClient) -> None:
    page = secured.get("/login")
    assert page.status_code == 200 and 'name="token"' in page.text
    response = secured.post("/login", data={"token": "op-secret"}, follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303, "/")
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=op-secret;")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert secured.post("/api/deployments", json=nixl_1p1d()).status_code == 201
    [login, created] = reversed(secured.get("/api/events").json())
    assert (login["kind"], login["actor"]) == ("auth.login", "operator:alice")
    assert created["actor"] == "operator:alice"


def test_a_wrong_login_is_401_and_sets_nothing(secured: TestClient) -> None:
    response = secured.post("/login", data={"token": "guess"}, follow_redirects=False)
    assert response.status_code == 401
    assert "set-cookie" not in response.headers and "Unknown token." in response.text


def test_logout_clears_the_cookie(secured: TestClient) -> None:
    secured.post("/login", data={"token": "view-secret"}, follow_redirects=False)
    assert secured.get("/api/events").status_code == 200
    response = secured.post("/logout", follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303, "/login")
    assert secured.get("/api/events").status_code == 401
    kinds = [e["kind"] for e in secured.get("/api/events", headers=AS_VIEWER).json()]
    assert kinds == ["auth.logout", "auth.login"]


def test_without_tokens_login_just_redirects(client: TestClient) -> None:
    response = client.post("/login", data={"token": "x"}, follow_redirects=False)
    assert response.status_code == 303 and "set-cookie" not in response.headers


def test_token_book_names_and_roles() -> None:
    book = TokenBook(Settings(operator_tokens=["alice:a", "b"], viewer_tokens=["c:x:y"]))
    assert book.identify("a").label == "operator:alice"
    assert book.identify("b").label == "operator:token2"
    viewer = book.identify("y")  # the secret is after the last colon
    assert (viewer.role, viewer.name) == (Role.VIEWER, "c:x")
    assert book.identify("") is None and book.identify("alice:a") is None


@pytest.mark.parametrize(
    ("header", "secret"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Bearer", None),
        ("Basic abc", None),
        (None, None),
    ],
)
def test_bearer(header: str | None, secret: str | None) -> None:
    assert bearer(header) == secret


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("::", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_viewers_see_secret_env_and_args_masked_and_operators_see_them(
    make_client: MakeClient,
) -> None:
    client = make_client(operator_tokens=[OPERATOR], viewer_tokens=[VIEWER])
    spec = nixl_1p1d(
        engine="vllm",  # --api-key is vLLM's: the stand-in does not take it
        env={"HF_TOKEN": "hf-very-secret", "VLLM_LOGGING_LEVEL": "INFO"},
        extra_args=["--api-key", "key-very-secret"],
    )
    assert client.post("/api/deployments", json=spec, headers=AS_OPERATOR).status_code == 201
    changed = {**spec, "env": {**spec["env"], "HF_TOKEN": "hf-other-secret"}}
    assert client.put("/api/deployments/pd", json=changed, headers=AS_OPERATOR).status_code == 200
    for path in (
        "/api/deployments",
        "/api/deployments/pd",
        "/api/deployments/pd/revisions/1",
        "/api/deployments/pd/diff?from=1&to=2",
    ):
        shown = client.get(path, headers=AS_VIEWER)
        assert shown.status_code == 200
        assert "very-secret" not in shown.text and "other-secret" not in shown.text, path
    body = client.get("/api/deployments/pd", headers=AS_VIEWER).json()
    assert body["spec"]["env"] == {"HF_TOKEN": "***", "VLLM_LOGGING_LEVEL": "INFO"}
    assert body["spec"]["extra_args"] == ["--api-key", "***"]
    full = client.get("/api/deployments/pd", headers=AS_OPERATOR).json()
    assert full["spec"]["env"]["HF_TOKEN"] == "hf-other-secret"
