"""Request bodies over the limit are 413, whether announced by Content-Length or streamed."""

from __future__ import annotations

import json

from tests.specs import nixl_1p1d
from tests.web.conftest import MakeClient


def test_a_body_over_the_limit_is_413(make_client: MakeClient) -> None:
    client = make_client(max_body_bytes=2048)
    body = nixl_1p1d(env={"BIG": "x" * 3000})
    response = client.post("/api/deployments", json=body)
    assert response.status_code == 413
    assert response.json() == {"detail": "request body larger than 2048 bytes"}
    assert client.get("/api/events").json() == []


def test_a_streamed_body_over_the_limit_is_413(make_client: MakeClient) -> None:
    client = make_client(max_body_bytes=2048)
    data = json.dumps(nixl_1p1d(env={"BIG": "x" * 3000})).encode()
    chunks = (data[i : i + 512] for i in range(0, len(data), 512))  # no Content-Length
    response = client.post(
        "/api/deployments", content=chunks, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413


def test_a_body_under_the_limit_passes(make_client: MakeClient) -> None:
    client = make_client(max_body_bytes=4096)
    assert client.post("/api/deployments", json=nixl_1p1d()).status_code == 201


def test_the_default_limit_is_one_mib(make_client: MakeClient) -> None:
    client = make_client()
    response = client.post(
        "/api/deployments",
        content=b"{" + b" " * (1 << 20) + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413
