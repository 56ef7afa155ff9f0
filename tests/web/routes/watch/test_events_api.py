"""/api/events: everything an operator did, newest first, filtered by deployment or kind."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.specs import colocated, nixl_1p1d


def test_events_record_each_change_newest_first(client: TestClient) -> None:
    client.post("/api/deployments", json=nixl_1p1d())
    client.post("/api/deployments", json=colocated())
    client.put("/api/deployments/pd", json=nixl_1p1d(time_scale=2.0), params={"reason": "slow"})
    client.delete("/api/deployments/solo")
    events = client.get("/api/events").json()
    assert [(e["kind"], e["deployment"]) for e in events] == [
        ("deployment.deleted", "solo"),
        ("deployment.updated", "pd"),
        ("deployment.created", "solo"),
        ("deployment.created", "pd"),
    ]
    assert events[1]["message"] == "pd updated to revision 2 (pending): slow"
    assert events[1]["detail"] == {"revision": 2, "previous": 1, "state": "pending"}
    assert all(e["actor"] == "anonymous" and e["ts"].endswith("Z") for e in events)


def test_events_filter_and_limit(client: TestClient) -> None:
    for name in ("a", "b", "c"):
        client.post("/api/deployments", json=colocated(name))
    assert [
        e["deployment"] for e in client.get("/api/events", params={"deployment": "b"}).json()
    ] == ["b"]
    assert [e["deployment"] for e in client.get("/api/events", params={"limit": 2}).json()] == [
        "c",
        "b",
    ]
    assert client.get("/api/events", params={"kind": "auth.login"}).json() == []


@pytest.mark.parametrize("limit", [0, 1001, "many"])
def test_an_out_of_bounds_limit_is_422(client: TestClient, limit: object) -> None:
    response = client.get("/api/events", params={"limit": limit})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "limit"]
