"""Attached deployments that discover their instances (a Prometheus server's targets or a
vllm-router's workers) through the API: stored like a listed one; every rule broken is a 422
naming the field, the sources' hosts checked as the instances' are."""

from __future__ import annotations

import copy
from typing import Any

import pytest

PROM = "http://127.0.0.1:19090"


def discovering(**over: Any) -> dict[str, Any]:
    def group(role: str) -> dict[str, Any]:
        found = {"prometheus": PROM, "match": {"llm-d.ai/role": role, "job": "vllm"}}
        return {"name": role, "role": role, "discover": found}

    spec = {
        "name": "found",
        "engine": "external",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [group("prefill"), group("decode")],
        "external_proxy": {"url": "http://127.0.0.1:18000", "kind": "vllm-router"},
    }
    return {**spec, **over}


def with_discover(i: int, **over: Any) -> dict[str, Any]:
    spec = discovering()
    spec["groups"] = copy.deepcopy(spec["groups"])
    spec["groups"][i]["discover"].update(over)
    return spec


def with_group(i: int, **over: Any) -> dict[str, Any]:
    spec = discovering()
    spec["groups"] = copy.deepcopy(spec["groups"])
    spec["groups"][i].update(over)
    return spec


def test_a_discovering_deployment_is_stored_with_its_sources(client):
    resp = client.post("/api/deployments", json=discovering())
    assert resp.status_code == 201, resp.text
    stored = resp.json()["spec"]["groups"][0]
    assert stored["urls"] == []
    assert stored["discover"] == {
        "prometheus": PROM,
        "match": {"llm-d.ai/role": "prefill", "job": "vllm"},
        "router": None,
        "every_s": 5.0,
    }
    by_router = with_group(1, discover={"router": "http://localhost:18000/", "every_s": 2})
    by_router["name"] = "routed"
    resp = client.post("/api/deployments", json=by_router)
    assert resp.status_code == 201, resp.text
    assert resp.json()["spec"]["groups"][1]["discover"]["router"] == "http://localhost:18000"


def test_before_any_look_its_status_is_its_proxy_alone(client):
    assert client.post("/api/deployments", json=discovering()).status_code == 201
    rows = client.get("/api/deployments/found/status").json()
    assert [r["name"] for r in rows] == ["proxy"]


@pytest.mark.parametrize(
    ("spec", "loc", "words"),
    [
        (with_discover(0, prometheus=None), ["groups", 0, "discover"], "one source"),
        (
            with_discover(0, router="http://127.0.0.1:18000"),
            ["groups", 0, "discover"],
            "one source",
        ),
        (with_discover(1, match={}), ["groups", 1, "discover", "match"], "names the labels"),
        (
            with_group(0, discover={"router": "http://127.0.0.1:1", "match": {"a": "b"}}),
            ["groups", 0, "discover", "match"],
            "by the group's role",
        ),
        (with_discover(0, match={"bad key!": "x"}), ["groups", 0, "discover", "match"], "pattern"),
        (with_discover(0, every_s=0.1), ["groups", 0, "discover", "every_s"], "greater than"),
        (
            with_discover(0, prometheus="ftp://127.0.0.1:1"),
            ["groups", 0, "discover", "prometheus"],
            "http or https",
        ),
        (
            with_discover(0, prometheus="http://127.0.0.1:9090/api"),
            ["groups", 0, "discover", "prometheus"],
            "no path",
        ),
        (with_discover(0, extra=1), ["groups", 0, "discover", "extra"], "not permitted"),
        (
            with_discover(0, prometheus="http://10.0.0.9:9090"),
            ["groups", 0, "discover", "prometheus"],
            "PDCTL_ATTACH_HOSTS",
        ),
        (
            with_group(1, discover={"router": "http://prom.example:80"}),
            ["groups", 1, "discover", "router"],
            "not loopback",
        ),
        (
            with_group(0, urls=["http://127.0.0.1:18100"]),
            ["groups", 0, "urls"],
            "or discovers them, not both",
        ),
        (
            {
                **discovering(engine="sim", external_proxy=None),
                "groups": [
                    {"name": "p", "role": "prefill", "discover": {"router": PROM}},
                    {"name": "d", "role": "decode"},
                ],
            },
            ["groups", 0, "discover"],
            "only an attached",
        ),
    ],
)
def test_a_bad_discovery_is_a_422_naming_the_field(client, spec, loc, words):
    resp = client.post("/api/deployments", json=spec)
    assert resp.status_code == 422, resp.text
    item = resp.json()["detail"][0]
    got = [p for p in item["loc"] if p != "body"]
    assert got[: len(loc)] == loc, item  # the field, or a key inside it
    assert words in item["msg"], item


def test_a_source_on_an_allowed_host_may_be_named(make_client):
    client = make_client(attach_hosts=["10.0.0.0/8"])
    resp = client.post("/api/deployments", json=with_discover(0, prometheus="http://10.0.0.9:9090"))
    assert resp.status_code == 201, resp.text


@pytest.mark.parametrize("page", ["/deployments/found", "/deployments/found/commands"])
def test_the_pages_show_a_discovering_deployment(client, page):
    assert client.post("/api/deployments", json=discovering()).status_code == 201
    resp = client.get(page)
    assert resp.status_code == 200, resp.text[-2000:]
    if page == "/deployments/found":  # the commands page has no address to render a line at
        assert "found" in resp.text


def test_starting_it_is_refused_as_attached(client):
    assert client.post("/api/deployments", json=discovering()).status_code == 201
    resp = client.post("/api/deployments/found/start")
    assert resp.status_code == 409, resp.text
    assert "is attached" in resp.json()["detail"]
