"""Revisions of a deployment and the diff between two of them."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.specs import edited, nixl_1p1d


def three_revisions(client: TestClient) -> None:
    client.post("/api/deployments", json=nixl_1p1d())
    client.put(
        "/api/deployments/pd",
        json=edited(nixl_1p1d(), ("groups", 1, "count"), 2),
        params={"reason": "more decode"},
    )
    third = edited(nixl_1p1d(slo={"itl_ms": 30, "ttft_ms": None}), ("groups", 1, "count"), 2)
    client.put("/api/deployments/pd", json=third)


def test_revisions_are_listed_newest_first(client: TestClient) -> None:
    three_revisions(client)
    revisions = client.get("/api/deployments/pd/revisions").json()
    assert [(r["number"], r["reason"]) for r in revisions] == [
        (3, None),
        (2, "more decode"),
        (1, None),
    ]
    assert {r["actor"] for r in revisions} == {"anonymous"}


def test_a_revision_holds_its_spec_and_ports(client: TestClient) -> None:
    three_revisions(client)
    revision = client.get("/api/deployments/pd/revisions/2").json()
    assert revision["spec"]["groups"][1]["count"] == 2
    assert set(revision["ports"]["instances"]) == {"prefill-0", "decode-0", "decode-1"}


def test_the_diff_names_changed_fields_with_old_and_new(client: TestClient) -> None:
    three_revisions(client)
    diff = client.get("/api/deployments/pd/diff", params={"from": 1, "to": 3}).json()
    assert (diff["from"], diff["to"]) == (1, 3)
    assert diff["changes"] == [
        {"path": ["groups", 1, "count"], "op": "changed", "old": 1, "new": 2},
        {"path": ["slo", "itl_ms"], "op": "changed", "old": 50.0, "new": 30.0},
        {"path": ["slo", "ttft_ms"], "op": "changed", "old": 1000.0, "new": None},
    ]
    added = [c["path"] for c in diff["port_changes"]]
    assert added == [["instances", "decode-1"]]
    assert diff["port_changes"][0]["op"] == "added"


def test_a_diff_backwards_and_with_itself(client: TestClient) -> None:
    three_revisions(client)
    back = client.get("/api/deployments/pd/diff", params={"from": 2, "to": 1}).json()
    assert back["changes"] == [
        {"path": ["groups", 1, "count"], "op": "changed", "old": 2, "new": 1}
    ]
    same = client.get("/api/deployments/pd/diff", params={"from": 2, "to": 2}).json()
    assert same["changes"] == same["port_changes"] == []


def test_unknown_revisions_are_404_and_bad_numbers_422(client: TestClient) -> None:
    three_revisions(client)
    response = client.get("/api/deployments/pd/revisions/9")
    assert response.status_code == 404
    assert response.json() == {"detail": "deployment 'pd' has no revision 9 (current: 3)"}
    assert client.get("/api/deployments/pd/diff", params={"from": 1, "to": 9}).status_code == 404
    response = client.get("/api/deployments/pd/diff", params={"from": 0, "to": 1})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "from"]
    assert client.get("/api/deployments/pd/diff", params={"to": 1}).status_code == 422
