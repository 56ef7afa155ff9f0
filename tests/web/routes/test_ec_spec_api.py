"""An encode group without its EC settings is a 422 naming the field, through the API; a whole
EPD spec is stored."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.specs import EC_STORE, edited, epd_1e1p1d


def test_an_encoder_without_a_storage_path_is_a_422_naming_it(client: TestClient) -> None:
    body = edited(epd_1e1p1d(), ("ec_transfer", "ec_connector_extra_config"), {})
    response = client.post("/api/deployments", json=body)
    assert response.status_code == 422, response.text
    [item] = response.json()["detail"]
    assert item["loc"] == [
        "body",
        "ec_transfer",
        "ec_connector_extra_config",
        "shared_storage_path",
    ]
    assert client.get("/api/deployments").json() == []


def test_an_unknown_ec_connector_is_a_422_naming_it(client: TestClient) -> None:
    body = edited(epd_1e1p1d(), ("ec_transfer", "ec_connector"), "ECNope")
    response = client.post("/api/deployments", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "ec_transfer", "ec_connector"]


def test_an_epd_spec_is_stored(make_client) -> None:
    # on a host whose operator lets engines use the store (PDCTL_ENGINE_PATH_ROOTS)
    client = make_client(engine_path_roots=[EC_STORE])
    response = client.post("/api/deployments", json=epd_1e1p1d())
    assert response.status_code in (200, 201), response.text
