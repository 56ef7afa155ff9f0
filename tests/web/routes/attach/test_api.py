"""Attached deployments through the API: stored, versioned and audited like any other; every
address checked (a 422 naming the field); every lifecycle verb refused with a 409 that says
what the operator would run instead."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from state.store import Store


def attached(name: str = "ext", **over: Any) -> dict[str, Any]:
    spec = {
        "name": name,
        "engine": "external",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [
            {"name": "prefill", "role": "prefill", "urls": ["http://127.0.0.1:18100"]},
            {"name": "decode", "role": "decode", "urls": ["http://localhost:18200/"]},
        ],
        "external_proxy": {"url": "http://127.0.0.1:18000", "kind": "vllm-router"},
    }
    return {**spec, **over}


def with_group(i: int, **over: Any) -> dict[str, Any]:
    spec = attached()
    spec["groups"] = copy.deepcopy(spec["groups"])
    spec["groups"][i].update(over)
    return spec


def only_error(resp) -> tuple[list, str]:
    assert resp.status_code == 422, resp.text
    item = resp.json()["detail"][0]
    return item["loc"], item["msg"]


def test_an_attached_deployment_is_stored_versioned_and_audited(client):
    resp = client.post("/api/deployments", json=attached(), params={"reason": "on-call"})
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert body["revision"] == 1 and body["spec"]["engine"] == "external"
    assert body["spec"]["groups"][1]["urls"] == ["http://localhost:18200"]  # trailing / dropped
    assert body["state"] == "applied"  # it runs already: pdctl only watches it
    edited = attached(slo={"ttft_ms": 500.0, "itl_ms": 40.0})
    changed = client.put("/api/deployments/ext", json=edited).json()
    assert (changed["revision"], changed["state"]) == (2, "applied")
    events = client.get("/api/events", params={"deployment": "ext"}).json()
    kinds = [e["kind"] for e in events]
    assert "deployment.created" in kinds and "deployment.updated" in kinds


@pytest.mark.parametrize(
    ("spec", "loc", "words"),
    [
        (with_group(0, urls=["ftp://127.0.0.1:1"]), ["groups", 0, "urls", 0], "http or https"),
        (with_group(0, urls=["http://127.0.0.1:1/v1"]), ["groups", 0, "urls", 0], "no path"),
        (with_group(0, urls=["http://u:p@127.0.0.1:1"]), ["groups", 0, "urls", 0], "no user"),
        (with_group(0, urls=["http://127.0.0.1:99999"]), ["groups", 0, "urls", 0], "port"),
        (with_group(0, urls=[]), ["groups", 0, "urls"], "names each instance's URL"),
        (with_group(0, count=2), ["groups", 0, "count"], "not 2"),
        (
            with_group(1, urls=["http://127.0.0.1:18100"]),
            ["groups", 1, "urls", 0],
            "is also prefill-0",
        ),
        (with_group(0, gpus=[0]), ["groups", 0, "gpus"], "not pdctl's"),
        (
            attached(external_proxy={"url": "http://127.0.0.1:1", "kind": "haproxy"}),
            ["external_proxy", "kind"],
            "pdctl",
        ),
        (with_group(0, urls=["http://10.1.2.3:8000"]), ["groups", 0, "urls", 0], "ATTACH_HOSTS"),
        (
            attached(external_proxy={"url": "http://example.com:80"}),
            ["external_proxy", "url"],
            "not loopback",
        ),
        (
            {**attached(engine="sim"), "external_proxy": None},
            ["groups", 0, "urls"],
            "only an attached",
        ),
    ],
)
def test_a_bad_attached_spec_is_a_422_naming_the_field(client, spec, loc, words):
    got, msg = only_error(client.post("/api/deployments", json=spec))
    assert got[-len(loc) :] == loc, (got, msg)
    assert words in msg


def test_hosts_the_operator_allows_may_be_attached(make_client):
    client = make_client(attach_hosts=["10.0.0.0/8", "gpu-node-1"])
    spec = with_group(0, urls=["http://10.1.2.3:8000"])
    spec["groups"][1]["urls"] = ["https://gpu-node-1:8443"]
    assert client.post("/api/deployments", json=spec).status_code == 201
    refused = {**with_group(0, urls=["http://11.0.0.1:8000"]), "name": "ext2"}
    loc, _ = only_error(client.post("/api/deployments", json=refused))
    assert loc[-4:] == ["groups", 0, "urls", 0]


@pytest.fixture
def ext(client):
    assert client.post("/api/deployments", json=attached()).status_code == 201
    return client


@pytest.mark.parametrize("verb", ["start", "stop", "restart"])
def test_lifecycle_verbs_are_refused_with_what_to_run(ext, verb):
    resp = ext.post(f"/api/deployments/ext/{verb}")
    assert resp.status_code == 409, resp.text
    msg = resp.json()["detail"]
    assert "is attached" in msg and f"does not {verb} it" in msg
    assert "vllm serve tiny --port 18100" in msg  # the line the operator would type


def test_a_mode_switch_is_refused(ext):
    resp = ext.post(
        "/api/deployments/ext/switch", json={"mode": "read", "strategy": "hold", "reason": "t"}
    )
    assert resp.status_code == 409, resp.text
    assert (
        "is attached" in resp.json()["detail"]
        and "does not switch its mode" in resp.json()["detail"]
    )


def test_an_apply_that_would_restart_is_refused_with_the_flags(ext):
    edited = with_group(1, max_num_seqs=64)
    resp = ext.put("/api/deployments/ext", json=edited)
    assert resp.status_code == 409, resp.text
    msg = resp.json()["detail"]
    assert "is attached" in msg and "decode-0: --max-num-seqs 64" in msg
    assert ext.get("/api/deployments/ext").json()["revision"] == 1  # nothing stored
    # the operator restarted it themselves: recorded without a rollout
    stored = ext.put("/api/deployments/ext", json=edited, params={"rollout": "false"})
    assert stored.status_code == 200 and stored.json()["revision"] == 2


def test_an_advisor_proposal_that_restarts_is_refused(client, tmp_path):
    from services.rollouts import refuse_attached_apply

    store: Store = client.app.state.store
    assert client.post("/api/deployments", json=attached()).status_code == 201
    spec = store.get("ext").spec
    bigger = spec.model_copy(
        update={"groups": [spec.groups[0], spec.groups[1].model_copy(update={"max_num_seqs": 8})]}
    )
    with pytest.raises(Exception, match="does not apply this advisor proposal") as err:
        refuse_attached_apply(store, "ext", bigger, "advisor", True)
    assert getattr(err.value, "status", None) == 409
    assert "decode-0: --max-num-seqs 8" in str(err.value)


@pytest.mark.parametrize(
    "page",
    ["/", "/deployments/ext", "/deployments/ext/topology", "/deployments/ext/commands"],
)
def test_the_pages_show_an_attached_deployment(ext, page):
    resp = ext.get(page)
    assert resp.status_code == 200, resp.text[-2000:]
    if page.endswith("/commands"):  # what runs elsewhere, at its address; no proxy of ours
        assert "vllm serve tiny --port 18200 --host localhost" in resp.text
        assert "pdctl proxy" not in resp.text
    else:
        assert "ext" in resp.text


def test_its_status_rows_are_its_addresses(ext):
    rows = ext.get("/api/deployments/ext/status").json()
    assert [(r["name"], r["url"]) for r in rows] == [
        ("proxy", "http://127.0.0.1:18000"),
        ("prefill-0", "http://127.0.0.1:18100"),
        ("decode-0", "http://localhost:18200"),
    ]
