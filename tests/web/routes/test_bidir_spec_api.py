"""Bidirectional KV asked of a connector that has none is a 422 naming the key, through the API."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.specs import colocated, moriio_1p1d

KEY = "bidirectional_kv_xfer"


def test_through_the_api_it_is_a_422_naming_the_key(client: TestClient) -> None:
    response = client.post(
        "/api/deployments", json=moriio_1p1d(kv_connector_extra_config={KEY: True})
    )
    assert response.status_code == 422, response.text
    [item] = response.json()["detail"]
    assert item["loc"] == ["body", "kv_connector_extra_config", KEY]
    assert client.get("/api/deployments").json() == []


def test_a_colocated_one_is_a_422_naming_the_key_too(client: TestClient) -> None:
    response = client.post(
        "/api/deployments", json=colocated(kv_connector_extra_config={KEY: True})
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "kv_connector_extra_config", KEY]
