"""Steering an attached deployment through the API (issue 37, deliver 4): a role move behind
a proxy that is not pdctl's is refused unless forced, and pause, drain and release are
refused there, each a 409 saying why; bad input is a 422 naming the field. The moves and
calls that succeed run against real stand-ins in tests/e2e/attach/test_steer.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.web.routes.attach.test_api import attached
from tests.web.routes.attach.test_discovery import discovering

DOWN = "http://127.0.0.1:1"  # nothing listens: a probe there fails at once


def two_decodes(name: str, kind: str | None, urls: tuple[str, ...] = ()) -> dict[str, Any]:
    spec = attached(name)
    spec["groups"] = copy.deepcopy(spec["groups"])
    spec["groups"][1]["urls"] = list(urls) or ["http://127.0.0.1:18200", "http://127.0.0.1:18201"]
    spec["groups"][1]["count"] = 2
    if kind is None:
        spec.pop("external_proxy")
    else:
        spec["external_proxy"] = {"url": "http://127.0.0.1:18000", "kind": kind}
    return spec


def move(client, name: str, **body: Any):
    full = {"instance": "decode-1", "role": "prefill", "reason": "test", **body}
    return client.post(f"/api/deployments/{name}/role-moves", json=full)


@pytest.fixture
def made(client):
    for name, kind in (("routed", "vllm-router"), ("bare", None), ("ours", "pdctl")):
        resp = client.post("/api/deployments", json=two_decodes(name, kind))
        assert resp.status_code == 201, resp.text
    return client


def test_a_move_behind_another_proxy_is_refused_unless_forced(made):
    resp = move(made, "routed")
    assert resp.status_code == 409, resp.text
    said = resp.json()["detail"]
    assert "vllm-router proxy at http://127.0.0.1:18000 was not drained" in said
    assert "pdctl move --force" in said and "force: true" in said
    resp = move(made, "bare")
    assert resp.status_code == 409 and "--force" in resp.json()["detail"], resp.text


def test_a_forced_move_probes_the_engine_first(made):
    spec = two_decodes("gone", "vllm-router", ("http://127.0.0.1:18200", DOWN))
    assert made.post("/api/deployments", json=spec).status_code == 201
    resp = move(made, "gone", force=True)
    assert resp.status_code == 502, resp.text
    assert "decode-1 (http://127.0.0.1:1): GET /v1/pd_role" in resp.json()["detail"]
    # nothing was begun: no revision, no rollout
    assert made.get("/api/deployments/gone").json()["revision"] == 1
    assert made.get("/api/deployments/gone/rollouts").json() == []


def test_a_pdctl_proxy_without_its_token_is_refused_naming_the_setting(made):
    resp = move(made, "ours")
    assert resp.status_code == 409, resp.text
    assert "PDCTL_ATTACH_ADMIN_TOKEN" in resp.json()["detail"]
    resp = made.post("/api/deployments/ours/proxy/drain", json={"instance": "decode-0"})
    assert resp.status_code == 409 and "PDCTL_ATTACH_ADMIN_TOKEN" in resp.json()["detail"]


@pytest.mark.parametrize("verb", ["pause", "release", "drain", "undrain"])
def test_proxy_calls_are_refused_at_a_proxy_that_is_not_pdctls(made, verb):
    body = {"instance": "decode-0"} if verb in ("drain", "undrain") else {}
    resp = made.post(f"/api/deployments/routed/proxy/{verb}", json=body)
    assert resp.status_code == 409, resp.text
    said = resp.json()["detail"]
    assert "behind a vllm-router proxy (http://127.0.0.1:18000)" in said
    assert "pdctl proxy admin calls" in said
    resp = made.post(f"/api/deployments/bare/proxy/{verb}", json=body)
    assert resp.status_code == 409 and "names no proxy" in resp.json()["detail"]


def test_a_bad_move_or_proxy_call_names_its_field(made, make_client):
    resp = move(made, "routed", instance="decode-7", force=True)
    assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["body", "instance"]
    assert "no instance 'decode-7'" in resp.json()["detail"][0]["msg"]
    resp = move(made, "routed", force="yes please")
    assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["body", "force"]
    resp = made.post("/api/deployments/routed/proxy/freeze", json={})
    assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["path", "verb"]
    resp = made.post("/api/deployments/routed/proxy/pause", json={"group": "everything"})
    assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["body", "group"]
    # with a token, a pdctl proxy is reached: the input is checked there first
    tokened = make_client(attach_admin_token="s3cret")
    assert tokened.post("/api/deployments", json=two_decodes("ours", "pdctl")).status_code == 201
    resp = tokened.post("/api/deployments/ours/proxy/drain", json={})
    assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["body", "instance"]
    resp = tokened.post("/api/deployments/ours/proxy/drain", json={"instance": "decode-9"})
    assert resp.status_code == 422 and "no instance 'decode-9'" in resp.text
    resp = tokened.post("/api/deployments/ours/proxy/pause", json={"instance": "decode-0"})
    assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["body", "instance"]
    # the proxy does not answer: a 502 naming it
    resp = tokened.post("/api/deployments/ours/proxy/pause", json={})
    assert resp.status_code == 502 and "http://127.0.0.1:18000" in resp.json()["detail"]


def test_an_owned_deployment_not_started_has_no_proxy_to_steer(client):
    spec = {
        "name": "own",
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [{"name": "prefill", "role": "prefill"}, {"name": "decode", "role": "decode"}],
    }
    assert client.post("/api/deployments", json=spec).status_code == 201
    resp = client.post("/api/deployments/own/proxy/pause", json={})
    assert resp.status_code == 409 and "not been started" in resp.json()["detail"]


def test_instances_found_by_discovery_are_not_steered(make_client):
    client = make_client(attach_admin_token="s3cret")
    spec = discovering(external_proxy={"url": "http://127.0.0.1:18000", "kind": "pdctl"})
    assert client.post("/api/deployments", json=spec).status_code == 201
    resp = client.post("/api/deployments/found/proxy/drain", json={"instance": "decode-0"})
    assert resp.status_code == 409, resp.text
    assert "discovers the instances of group(s) prefill, decode" in resp.json()["detail"]
