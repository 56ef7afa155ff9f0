"""GET /api/cluster/nodes and GET /api/deployments/{name}/placement: on local processes one
node (this host); on a fake cluster (tests/controller/fakes.py) each node with what runs on it,
and where each process was placed, moved when its node dies; a cluster that does not answer
is a 503 in words, an unknown deployment a 404 naming it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from controller.launch.placement import Node
from controller.service import ControlService
from controller.supervise.placement_log import PlacementLog
from tests.controller.factories import cluster_nodes
from tests.controller.fakes import FakeBackend
from tests.controller.supervise.test_supervisor import Harness
from tests.specs import nixl_1p1d
from tests.web.conftest import AS_VIEWER, MakeClient

ONE_GPU = {"placement": {"gpus_per_instance": 1}}
PD = nixl_1p1d(
    groups=[
        {"name": "prefill", "role": "prefill", **ONE_GPU},
        {"name": "decode", "role": "decode", **ONE_GPU},
    ]
)


def on_fake(client: TestClient, tmp_path: Path, backend: FakeBackend) -> Harness:
    """The app's controller over `backend`, with a fake probe and clock the test drives."""
    h = Harness(tmp_path, backend=backend)
    state = client.app.state
    log = PlacementLog(state.store.record, state.placements)
    h.sup.on_event = log
    log.watch(h.sup)
    state.controller = ControlService(h.sup, state.store.record, placements=log)
    return h


@pytest.fixture
def cluster(make_client: MakeClient, tmp_path: Path) -> tuple[TestClient, Harness]:
    client = make_client(controller=False)
    return client, on_fake(client, tmp_path, FakeBackend(nodes=cluster_nodes()))


def test_local_processes_are_one_node_this_host_gpus_not_counted(client: TestClient) -> None:
    response = client.get("/api/cluster/nodes")
    assert response.status_code == 200
    assert response.json() == [
        {
            "id": "local",
            "address": "127.0.0.1",
            "alive": True,
            "head": True,
            "gpus": None,
            "gpus_free": None,
            "resources": {},
            "labels": {},
            "processes": [],
        }
    ]


def test_a_viewer_may_list_the_nodes_and_no_token_may_not(make_client: MakeClient) -> None:
    secured = make_client(operator_tokens=["alice:op-secret"], viewer_tokens=["bob:view-secret"])
    assert secured.get("/api/cluster/nodes", headers=AS_VIEWER).status_code == 200
    assert secured.get("/api/cluster/nodes").status_code == 401


def test_without_a_controller_the_nodes_are_a_503(make_client: MakeClient) -> None:
    response = make_client(controller=False).get("/api/cluster/nodes")
    assert response.status_code == 503
    assert response.json() == {"detail": "this control plane runs without a controller"}


def test_a_fake_cluster_lists_each_node_with_what_runs_on_it(cluster) -> None:
    client, h = cluster
    assert client.post("/api/deployments", json=PD).status_code == 201
    assert client.post("/api/deployments/pd/start").status_code == 202
    asyncio.run(h.polls(3))
    nodes = client.get("/api/cluster/nodes").json()
    assert [(n["address"], n["head"], n["gpus"]) for n in nodes] == [
        ("127.0.0.2", True, 2.0),
        ("127.0.0.3", False, 2.0),
        ("127.0.0.4", False, 2.0),
    ]
    assert [[(p["deployment"], p["process"]) for p in n["processes"]] for n in nodes] == [
        [("pd", "proxy"), ("pd", "prefill-0")],
        [("pd", "decode-0")],
        [],
    ]
    assert nodes[0]["processes"][1] == {
        "deployment": "pd",
        "process": "prefill-0",
        "role": "prefill",
        "state": "RUNNING",
    }
    assert nodes[1]["labels"] == {"pool": "decode"} and nodes[2]["resources"] == {"rdma": 1.0}


def test_placement_is_kept_at_a_start_and_follows_an_instance_off_a_lost_node(cluster) -> None:
    client, h = cluster
    client.post("/api/deployments", json=PD)
    assert client.get("/api/deployments/pd/placement").json() == {
        "deployment": "pd",
        "processes": [],
    }
    client.post("/api/deployments/pd/start")
    first = client.get("/api/deployments/pd/placement").json()["processes"]
    assert [(p["process"], p["node_address"], p["gpus"]) for p in first] == [
        ("proxy", "127.0.0.2", 0.0),
        ("decode-0", "127.0.0.3", 1.0),
        ("prefill-0", "127.0.0.2", 1.0),
    ]
    assert first[1]["node_id"] == "b" * 56 and first[1]["placed_at"].endswith("Z")

    asyncio.run(h.polls(3))
    h.backend.lose_node("127.0.0.3")
    asyncio.run(h.polls(6))
    after = client.get("/api/deployments/pd/placement").json()["processes"]
    assert (after[1]["node_address"], after[1]["node_id"]) == ("127.0.0.4", "c" * 56)
    assert after[1]["placed_at"] >= first[1]["placed_at"]
    assert [after[0], after[2]] == [first[0], first[2]]  # the others stayed where they were
    nodes = client.get("/api/cluster/nodes").json()
    assert [n["alive"] for n in nodes] == [True, False, True]
    assert [p["process"] for p in nodes[2]["processes"]] == ["decode-0"]
    kinds = [e["kind"] for e in client.get("/api/events", params={"deployment": "pd"}).json()]
    assert "node_lost" in kinds and "replaced" in kinds


def test_the_placement_of_an_unknown_deployment_is_a_404_naming_it(client: TestClient) -> None:
    response = client.get("/api/deployments/nope/placement")
    assert response.status_code == 404
    assert response.json() == {"detail": "no deployment named 'nope'"}


def test_placement_outlives_a_restart_of_the_plane_and_goes_with_the_deployment(
    cluster,
) -> None:
    client, _ = cluster
    client.post("/api/deployments", json=PD)
    client.post("/api/deployments/pd/start")
    placements = client.app.state.placements
    assert len(placements.of("pd")) == 3  # in the database, not in the controller
    client.app.state.controller = None
    assert len(client.get("/api/deployments/pd/placement").json()["processes"]) == 3
    assert client.delete("/api/deployments/pd").status_code == 204
    assert placements.of("pd") == []


class Unanswering(FakeBackend):
    async def nodes(self) -> list[Node]:
        raise ConnectionError("Traceback (most recent call last):\n  File x\nGCS unavailable")


def test_a_cluster_that_does_not_answer_is_a_503_in_words(
    make_client: MakeClient, tmp_path: Path
) -> None:
    client = make_client(controller=False)
    on_fake(client, tmp_path, Unanswering(nodes=cluster_nodes()))
    response = client.get("/api/cluster/nodes")
    assert response.status_code == 503
    assert response.json() == {"detail": "the cluster does not answer: GCS unavailable"}
    page = client.get("/cluster", headers={"HX-Request": "true"})
    assert page.status_code == 503 and page.headers["hx-retarget"] == "#notice"
    assert "Cluster unreachable" in page.text and "Traceback" not in page.text


def test_both_routes_are_in_the_openapi_document_with_their_bodies(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    nodes = doc["paths"]["/api/cluster/nodes"]["get"]["responses"]
    assert nodes["200"]["content"]["application/json"]["schema"]["items"] == {
        "$ref": "#/components/schemas/NodeOut"
    }
    assert "cluster does not answer" in nodes["503"]["description"]
    placement = doc["paths"]["/api/deployments/{name}/placement"]["get"]["responses"]
    assert placement["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PlacementOut"
    }
    assert "404" in placement
    gpus = doc["components"]["schemas"]["NodeOut"]["properties"]["gpus"]
    assert {"type": "null"} in gpus["anyOf"]  # not counted on one host
