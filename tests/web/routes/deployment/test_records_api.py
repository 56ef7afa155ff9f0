"""/api/deployments: create, list, read, replace, delete, clone, with every error path."""

from __future__ import annotations

from fastapi.testclient import TestClient

from harness.processes import free_port
from tests.specs import colocated, edited, moriio_1p1d, nixl_1p1d


def test_create_allocates_every_port_and_reads_back(client: TestClient) -> None:
    response = client.post("/api/deployments", json=nixl_1p1d(), params={"reason": "first"})
    assert response.status_code == 201
    body = response.json()
    assert (body["name"], body["revision"], body["actor"], body["reason"]) == (
        "pd",
        1,
        "anonymous",
        "first",
    )
    ports = body["ports"]
    assert set(ports["instances"]) == {"prefill-0", "decode-0"}
    assert all(
        41000 <= p["http"] <= 41999 and p["side_channel"] for p in ports["instances"].values()
    )
    assert client.get("/api/deployments/pd").json() == body
    assert [d["name"] for d in client.get("/api/deployments").json()] == ["pd"]


def test_a_second_deployment_gets_other_ports(client: TestClient) -> None:
    a = client.post("/api/deployments", json=moriio_1p1d("a", tp=4)).json()["ports"]
    b = client.post("/api/deployments", json=moriio_1p1d("b", tp=4)).json()["ports"]

    def claimed(ports: dict) -> set[int]:
        out = {ports["proxy"], ports["registry"]}
        for p in ports["instances"].values():
            out |= {
                p["http"],
                *range(p["handshake"], p["handshake"] + 4),
                *range(p["notify"], p["notify"] + 4),
            }
        return out

    assert claimed(a).isdisjoint(claimed(b))


def test_a_duplicate_name_is_409(client: TestClient) -> None:
    assert client.post("/api/deployments", json=nixl_1p1d()).status_code == 201
    response = client.post("/api/deployments", json=nixl_1p1d())
    assert response.status_code == 409
    assert response.json() == {"detail": "deployment 'pd' already exists"}


def test_unknown_names_are_404(client: TestClient) -> None:
    for method, path in [
        ("GET", "/api/deployments/nope"),
        ("DELETE", "/api/deployments/nope"),
        ("GET", "/api/deployments/nope/revisions"),
    ]:
        response = client.request(method, path)
        assert response.status_code == 404, path
        assert response.json() == {"detail": "no deployment named 'nope'"}
    assert client.put("/api/deployments/nope", json=nixl_1p1d("nope")).status_code == 404
    assert client.post("/api/deployments/nope/clone", json={"name": "x"}).status_code == 404


def test_put_writes_a_new_revision_and_keeps_the_ports(client: TestClient) -> None:
    first = client.post("/api/deployments", json=nixl_1p1d()).json()
    changed = edited(nixl_1p1d(), ("slo",), {"ttft_ms": 500})
    response = client.put("/api/deployments/pd", json=changed, params={"reason": "tighter"})
    assert response.status_code == 200
    second = response.json()
    assert (second["revision"], second["reason"]) == (2, "tighter")
    assert second["spec"]["slo"]["ttft_ms"] == 500
    assert second["ports"] == first["ports"]  # running instances need not move


def test_put_without_changes_writes_no_revision(client: TestClient) -> None:
    client.post("/api/deployments", json=nixl_1p1d())
    assert client.put("/api/deployments/pd", json=nixl_1p1d()).json()["revision"] == 1
    assert len(client.get("/api/deployments/pd/revisions").json()) == 1


def test_put_cannot_rename(client: TestClient) -> None:
    client.post("/api/deployments", json=nixl_1p1d())
    response = client.put("/api/deployments/pd", json=nixl_1p1d("other"))
    assert response.status_code == 422
    assert response.json()["detail"] == [
        {
            "loc": ["body", "name"],
            "type": "value_error",
            "msg": "the body names 'other' but the URL 'pd'; a deployment cannot be renamed: "
            "clone it",
        }
    ]


def test_put_may_give_a_port_the_deployment_already_holds(client: TestClient) -> None:
    ports = client.post("/api/deployments", json=colocated()).json()["ports"]
    http = ports["instances"]["main-0"]["http"]
    body = edited(colocated(), ("groups", 0, "ports"), [{"http": http}])
    assert client.put("/api/deployments/solo", json=body).status_code == 200


def test_delete_removes_the_deployment_and_frees_its_name(client: TestClient) -> None:
    client.post("/api/deployments", json=nixl_1p1d())
    response = client.delete("/api/deployments/pd", params={"reason": "done"})
    assert response.status_code == 204
    assert client.get("/api/deployments/pd").status_code == 404
    [event] = client.get("/api/events", params={"kind": "deployment.deleted"}).json()
    assert event["message"] == "pd deleted at revision 1: done"
    assert event["detail"]["spec"]["name"] == "pd"  # the last revision outlives the row
    assert client.post("/api/deployments", json=nixl_1p1d()).status_code == 201


def test_delete_is_refused_while_the_controller_runs_it(client: TestClient) -> None:
    class Running:
        def is_active(self, name: str) -> bool:
            return True

    client.post("/api/deployments", json=nixl_1p1d())
    real, client.app.state.controller = client.app.state.controller, Running()
    try:
        response = client.delete("/api/deployments/pd")
    finally:
        client.app.state.controller = real
    assert response.status_code == 409
    assert response.json() == {"detail": "deployment 'pd' has running instances: stop it first"}


def test_clone_copies_the_spec_with_fresh_ports(client: TestClient) -> None:
    # ports nothing holds (another test worker's instances hold some of 41000-41999)
    proxy_port, http = free_port(), free_port()
    body = edited(nixl_1p1d(proxy={"port": proxy_port}), ("groups", 0, "ports"), [{"http": http}])
    source = client.post("/api/deployments", json=body).json()
    response = client.post(
        "/api/deployments/pd/clone", json={"name": "pd-copy"}, params={"reason": "try"}
    )
    assert response.status_code == 201
    copy = response.json()
    assert copy["spec"]["model"] == "tiny" and copy["spec"]["groups"][0]["ports"] == []
    assert copy["ports"]["proxy"] != source["ports"]["proxy"]
    [event] = client.get("/api/events", params={"deployment": "pd-copy"}).json()
    assert (event["kind"], event["detail"]["source"]) == ("deployment.cloned", "pd")


def test_clone_errors(client: TestClient) -> None:
    client.post("/api/deployments", json=nixl_1p1d())
    assert client.post("/api/deployments/pd/clone", json={"name": "pd"}).status_code == 409
    response = client.post("/api/deployments/pd/clone", json={"name": "Not A Slug"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "name"]


def test_a_port_range_with_no_room_is_409(make_client) -> None:
    client = make_client(port_range=(41000, 41003))
    response = client.post("/api/deployments", json=nixl_1p1d())
    assert response.status_code == 409
    assert "cannot allocate ports for 'pd'" in response.json()["detail"]
