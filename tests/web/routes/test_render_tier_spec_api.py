"""A bad render group is a 422 naming the field, through the API, and nothing is stored."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.specs import nixl_1p1d


def test_a_render_group_with_gpus_is_a_422_naming_the_field(client: TestClient) -> None:
    body = nixl_1p1d()
    body["groups"].append({"name": "render", "role": "render", "gpus": [3]})
    response = client.post("/api/deployments", json=body)
    assert response.status_code == 422, response.text
    [item] = response.json()["detail"]
    assert item["loc"] == ["body", "groups", 2, "gpus"]
    assert client.get("/api/deployments").json() == []
