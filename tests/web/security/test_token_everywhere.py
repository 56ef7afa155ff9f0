"""With tokens set, every route answers only with one: the API, the pages, /metrics, and the
API's own description (/openapi.json, /docs, /redoc: issue 39, weak 7). Only /health, the
sign-in page and static files are open. Every GET operation the API describes is walked, so
one added later without the token is caught here, and the pages besides."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tests.web.conftest import AS_OPERATOR, AS_VIEWER, OPERATOR, VIEWER, MakeClient

OPEN = {"/health", "/login", "/logout"}
PAGES = ["/", "/deployments/1", "/deployments/new", "/docs", "/redoc", "/openapi.json", "/metrics"]


@pytest.fixture
def secured_app(make_client: MakeClient) -> TestClient:
    return make_client(operator_tokens=[OPERATOR], viewer_tokens=[VIEWER])


def get_routes(client: TestClient) -> list[str]:
    """Every GET operation of the API (its description, read with a token), and the pages."""
    doc = client.get("/openapi.json", headers=AS_VIEWER).json()
    paths = [re.sub(r"\{[^}]+\}", "1", p) for p, ops in doc["paths"].items() if "get" in ops]
    return sorted({*paths, *PAGES})


def test_no_get_route_answers_without_a_token(secured_app: TestClient) -> None:
    paths = get_routes(secured_app)
    assert len(paths) > 30 and "/api/deployments/1/revisions/1" in paths
    answered = {}
    for path in paths:
        if path in OPEN:
            continue
        response = secured_app.get(path, follow_redirects=False)
        if response.status_code not in (401, 303, 307):
            answered[path] = response.status_code
        if response.is_redirect:
            assert response.headers["location"].startswith("/login"), path
    assert answered == {}


@pytest.mark.parametrize("who", [AS_VIEWER, AS_OPERATOR])
def test_the_api_description_answers_with_a_token(secured_app: TestClient, who) -> None:
    doc = secured_app.get("/openapi.json", headers=who)
    assert doc.status_code == 200 and "/api/deployments/{name}/diff" in doc.json()["paths"]
    assert "/openapi.json" not in doc.json()["paths"]
    page = secured_app.get("/docs", headers=who)
    assert page.status_code == 200 and "swagger" in page.text.lower()
    assert secured_app.get("/redoc", headers=who).status_code == 200


def test_without_tokens_the_description_is_open(make_client: MakeClient) -> None:
    client = make_client()
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/docs").status_code == 200
