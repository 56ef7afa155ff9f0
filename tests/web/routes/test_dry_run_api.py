"""?dry_run=true on POST and PUT /api/deployments: every check and the deployment as it would
be (what `pdctl apply --dry-run` diffs), and nothing stored, no event written."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.specs import edited, nixl_1p1d


def test_a_dry_run_create_answers_the_deployment_and_stores_nothing(client: TestClient) -> None:
    response = client.post("/api/deployments", json=nixl_1p1d(), params={"dry_run": "true"})
    assert response.status_code == 200
    body = response.json()
    assert (body["name"], body["revision"], body["spec"]["slo"]["ttft_ms"]) == ("pd", 1, 1000.0)
    assert set(body["ports"]["instances"]) == {"prefill-0", "decode-0"}
    assert client.get("/api/deployments").json() == []
    assert client.get("/api/events").json() == []


def test_a_dry_run_put_answers_the_next_revision_and_stores_nothing(client: TestClient) -> None:
    first = client.post("/api/deployments", json=nixl_1p1d()).json()
    changed = edited(nixl_1p1d(), ("slo",), {"ttft_ms": 500})
    response = client.put(
        "/api/deployments/pd", json=changed, params={"dry_run": "true"}, headers={"If-Match": '"1"'}
    )
    assert response.status_code == 200 and "etag" not in response.headers
    body = response.json()
    assert (body["revision"], body["spec"]["slo"]["ttft_ms"]) == (2, 500)
    assert body["ports"] == first["ports"]
    assert client.get("/api/deployments/pd").json() == first
    assert len(client.get("/api/deployments/pd/revisions").json()) == 1


def test_a_dry_run_refuses_what_a_write_refuses(client: TestClient) -> None:
    client.post("/api/deployments", json=nixl_1p1d())
    client.put("/api/deployments/pd", json=edited(nixl_1p1d(), ("slo",), {"ttft_ms": 500}))
    stale = client.put(
        "/api/deployments/pd",
        json=edited(nixl_1p1d(), ("slo",), {"ttft_ms": 400}),
        params={"dry_run": "true"},
        headers={"If-Match": '"1"'},
    )
    assert stale.status_code == 409 and "revision 2" in stale.json()["detail"]
    bad = client.post(
        "/api/deployments", json=nixl_1p1d("other", connector=None), params={"dry_run": "true"}
    )
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "connector"]
    assert (
        client.post("/api/deployments", json=nixl_1p1d(), params={"dry_run": "1"}).status_code
        == 409
    )
