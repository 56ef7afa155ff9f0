"""Every integer a request may name is bounded by what SQLite stores (a signed 64-bit
INTEGER): past it, a 422 naming the field (a 400 naming If-Match), never an OverflowError
answered as a 500 that a viewer could trigger at will (issue 39, weak 8). The API's own
description is walked, so an integer added later without a bound is caught here."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.specs import nixl_1p1d
from tests.web.conftest import AS_OPERATOR, AS_VIEWER, OPERATOR, VIEWER, MakeClient

HUGE = "99999999999999999999999"
PAST_INT64 = str(2**63)


def unbounded(doc: dict[str, Any]) -> list[str]:
    """Each integer parameter or body field with no maximum SQLite can store."""
    schemas = doc["components"]["schemas"]
    found: list[str] = []

    def walk(s: dict[str, Any], where: str, seen: frozenset[str]) -> None:
        if "$ref" in s:
            name = s["$ref"].rsplit("/", 1)[-1]
            if name not in seen:
                walk(schemas[name], where, seen | {name})
            return
        for key in ("anyOf", "allOf", "oneOf"):
            for sub in s.get(key, []):
                walk(sub, where, seen)
        if s.get("type") == "integer" and s.get("maximum", 2**64) > 2**63:  # a float's 2**63
            found.append(where)
        for name, sub in s.get("properties", {}).items():
            walk(sub, f"{where}.{name}", seen)
        if isinstance(s.get("items"), dict):
            walk(s["items"], f"{where}[]", seen)
        if isinstance(s.get("additionalProperties"), dict):
            walk(s["additionalProperties"], f"{where}{{}}", seen)

    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            for p in op.get("parameters", []):
                walk(p["schema"], f"{method.upper()} {path} {p['in']} {p['name']}", frozenset())
            for content in op.get("requestBody", {}).get("content", {}).values():
                walk(content["schema"], f"{method.upper()} {path} body", frozenset())
    return found


@pytest.fixture
def client(make_client: MakeClient) -> TestClient:
    client = make_client(operator_tokens=[OPERATOR], viewer_tokens=[VIEWER])
    assert client.post("/api/deployments", json=nixl_1p1d(), headers=AS_OPERATOR).is_success
    return client


def test_no_integer_of_the_api_is_unbounded(client: TestClient) -> None:
    doc = client.get("/openapi.json", headers=AS_VIEWER).json()
    assert unbounded(doc) == []


@pytest.mark.parametrize("number", [PAST_INT64, HUGE])
@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("GET", "/api/deployments/pd/revisions/{n}", None, ["path", "number"]),
        ("GET", "/api/deployments/pd/diff?from=1&to={n}", None, ["query", "to"]),
        ("GET", "/api/deployments/pd/diff?from={n}&to=1", None, ["query", "from"]),
        (
            "POST",
            "/api/deployments/pd/rollout/undo",
            {"to_revision": "{n}"},
            ["body", "to_revision"],
        ),
        (
            "POST",
            "/api/deployments/pd/proposals/apply",
            {"rule": "r", "revision": "{n}"},
            ["body", "revision"],
        ),
        ("PUT", "/api/deployments/pd", {**nixl_1p1d(), "revision": "{n}"}, ["body", "revision"]),
    ],
)
def test_an_integer_past_int64_is_a_422_naming_the_field(
    client: TestClient, method, path, body, field, number
) -> None:
    url = path.format(n=number)
    content = None
    if body is not None:  # the number as JSON writes it: a bare integer literal
        import json

        content = json.dumps(body).replace('"{n}"', number)
    headers = {**AS_OPERATOR, "Content-Type": "application/json"}
    response = client.request(method, url, content=content, headers=headers)
    assert response.status_code == 422, response.text
    assert [item["loc"] for item in response.json()["detail"]] == [field]


def test_a_viewer_gets_a_422_too(client: TestClient) -> None:
    response = client.get(f"/api/deployments/pd/revisions/{PAST_INT64}", headers=AS_VIEWER)
    assert response.status_code == 422


@pytest.mark.parametrize("tag", [f'"{HUGE}"', PAST_INT64, f'W/"{HUGE}"'])
def test_an_if_match_past_any_revision_is_a_400_naming_it(client: TestClient, tag: str) -> None:
    response = client.put(
        "/api/deployments/pd", json=nixl_1p1d(), headers={**AS_OPERATOR, "If-Match": tag}
    )
    assert response.status_code == 400 and "If-Match" in response.text


@pytest.mark.parametrize(
    "path",
    [
        f"/api/deployments/pd/rollouts/{HUGE}",
        f"/api/deployments/pd/switches/{HUGE}",
        f"/api/bench/{HUGE}",
        f"/api/bench/compare?ids={HUGE}",
        f"/api/events?limit={HUGE}",
        f"/api/deployments/pd/logs/decode-0?lines={HUGE}",
    ],
)
def test_other_numbers_in_paths_are_4xx_not_500(client: TestClient, path: str) -> None:
    assert 400 <= client.get(path, headers=AS_OPERATOR).status_code < 500
