"""Where things run, on the pages: each process's node in the deployment's topology, the
cluster page with every node's GPUs and what runs on it, and a start that fits on no node
answered with the usual error (the notice for htmx, a 422 naming the field for the API)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from fastapi.testclient import TestClient

from tests.controller.factories import cluster_nodes
from tests.controller.fakes import FakeBackend
from tests.specs import edited, nixl_1p1d
from tests.web.conftest import MakeClient
from tests.web.routes.watch.test_cluster_api import PD, on_fake

HX = {"HX-Request": "true"}


def node_of(html: str, instance: str) -> tuple[str, str | None]:
    """The node address (and id) the topology shows for `instance`."""
    block = html.split(f'data-instance="{instance}"', 1)[1].split('class="node', 1)[0]
    found = re.search(r'data-node-address="([^"]+)"(?: data-node-id="([^"]+)")?', block)
    assert found, f"no node shown for {instance}"
    return found.group(1), found.group(2)


def test_the_topology_shows_each_process_on_its_cluster_node(
    make_client: MakeClient, tmp_path: Path
) -> None:
    client = make_client(controller=False)
    h = on_fake(client, tmp_path, FakeBackend(nodes=cluster_nodes()))
    client.post("/api/deployments", json=PD)
    client.post("/api/deployments/pd/start")
    asyncio.run(h.polls(3))
    html = client.get("/deployments/pd/topology", headers=HX).text
    assert node_of(html, "decode-0") == ("127.0.0.3", "b" * 56)
    assert node_of(html, "prefill-0") == ("127.0.0.2", "a" * 56)
    assert node_of(html, "proxy") == ("127.0.0.2", "a" * 56)
    assert f'node <code title="{"b" * 56}">{"b" * 12}</code>' in html  # the id, short


def test_on_one_host_the_topology_shows_the_host(make_client: MakeClient, tmp_path: Path) -> None:
    client = make_client(controller=False)
    h = on_fake(client, tmp_path, FakeBackend())
    client.post("/api/deployments", json=nixl_1p1d())
    client.post("/api/deployments/pd/start")
    asyncio.run(h.polls(3))
    html = client.get("/deployments/pd").text
    assert node_of(html, "decode-0") == ("127.0.0.1", None)
    assert "this host" in html


def test_a_never_started_deployment_shows_no_node(client: TestClient) -> None:
    client.post("/api/deployments", json=nixl_1p1d())
    assert "data-node-address" not in client.get("/deployments/pd/topology", headers=HX).text


def test_the_cluster_page_lists_nodes_gpus_and_what_runs_where(
    make_client: MakeClient, tmp_path: Path
) -> None:
    client = make_client(controller=False)
    h = on_fake(client, tmp_path, FakeBackend(nodes=cluster_nodes()))
    client.post("/api/deployments", json=PD)
    client.post("/api/deployments/pd/start")
    asyncio.run(h.polls(3))
    page = client.get("/cluster")
    assert page.status_code == 200 and 'href="/cluster"' in page.text
    rows = client.get("/cluster", headers=HX).text
    assert rows.count("<tr data-node=") == 3 and "<html" not in rows
    decode_row = rows.split('data-node-address="127.0.0.3"', 1)[1].split("</tr>", 1)[0]
    assert 'data-runs="pd/decode-0"' in decode_row and "2 / 2" in decode_row
    assert "pool=decode" in decode_row


def test_the_cluster_page_on_one_host_says_gpus_are_not_counted(client: TestClient) -> None:
    html = client.get("/cluster").text
    assert 'data-node-address="127.0.0.1"' in html and "not counted" in html


SOMEWHERE_ELSE = edited(
    nixl_1p1d(),
    ("groups", 1),
    {"name": "decode", "role": "decode", "placement": {"nodes": [{"address": "10.9.9.9"}]}},
)


def test_a_start_that_fits_on_no_node_is_the_usual_error(client: TestClient) -> None:
    assert client.post("/api/deployments", json=SOMEWHERE_ELSE).status_code == 201
    api = client.post("/api/deployments/pd/start")
    assert api.status_code == 422
    (problem,) = api.json()["detail"]
    assert problem["loc"] == ["body", "groups", 1, "placement", "nodes"]
    assert "no live node matches address 10.9.9.9" in problem["msg"]

    fragment = client.post("/deployments/pd/actions/start", headers=HX)
    assert fragment.status_code == 422
    assert fragment.headers["hx-retarget"] == "#notice"
    assert 'data-error-status="422"' in fragment.text
    assert "groups.1.placement.nodes: no live node matches address 10.9.9.9" in fragment.text
    assert client.get("/api/deployments/pd/placement").json()["processes"] == []
    assert client.get("/api/deployments/pd/status").json() == []  # nothing started
