"""`pdctl serve` moves a running stand-in decode to prefill and back by runtime role switching
(POST /api/deployments/{name}/role-moves) under a bounded load: no request fails, no process
restarts, and each move is a revision. Every refusal is a 4xx naming its field."""

from __future__ import annotations

import contextlib
import json

import pytest

from harness.control_plane import ControlPlane
from harness.processes import http_get, http_post
from harness.stack import bench_background, bench_finished

pytestmark = pytest.mark.e2e


def nixl(name: str, role_switch: bool = True, decodes: int = 2) -> dict:
    spec = {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [
            {"name": "prefill", "role": "prefill"},
            {"name": "decode", "role": "decode", "count": decodes},
        ],
        "proxy": {"hold_queue": 256, "hold_deadline_s": 60},
    }
    if role_switch:
        spec["role_switch"] = {}
    return spec


@pytest.fixture
def plane(tmp_path):
    plane = ControlPlane(tmp_path).start()
    try:
        yield plane
    finally:
        status, _ = plane.api("POST", "/deployments/flip/stop")
        if status == 202:
            with contextlib.suppress(TimeoutError):
                plane.wait(
                    "flip",
                    lambda us: all(u["state"] in ("STOPPED", "EXITED") for u in us.values()),
                    30,
                )
        plane.close()


def move(plane, instance: str, role: str, name: str = "flip", **extra) -> tuple[int, dict]:
    body = {"instance": instance, "role": role, "reason": "test", **extra}
    return plane.api("POST", f"/deployments/{name}/role-moves", body)


def proxy_entry(plane, proxy_port: int, url: str) -> dict:
    status, raw = http_get(
        f"http://127.0.0.1:{proxy_port}/admin/instances", headers=plane.admin_headers("flip")
    )
    assert status == 200
    return next(i for i in json.loads(raw)["instances"] if i["url"] == url)


def test_a_decode_moves_to_prefill_and_back_under_load_with_nothing_lost(plane, tmp_path):
    status, created = plane.api("POST", "/deployments", nixl("flip"))
    assert status == 201, created
    proxy_port = created["ports"]["proxy"]
    status, body = move(plane, "decode-1", "prefill")
    assert status == 409 and "not been started" in body["detail"]
    plane.api("POST", "/deployments/flip/start")
    units = plane.running("flip")
    pids = {n: u.get("pid") for n, u in units.items()}
    url = units["decode-1"]["url"]
    assert json.loads(http_get(url + "/v1/pd_role")[1])["role"] == "decode"

    load = bench_background(f"http://127.0.0.1:{proxy_port}", tmp_path, "flip", 6, 40)
    status, moved = move(plane, "decode-1", "prefill", drain_timeout_s=60)
    assert status == 200, moved
    assert (moved["from"], moved["to"], moved["epoch"]) == ("decode", "prefill", 1)
    entry = proxy_entry(plane, proxy_port, url)
    assert (entry["role"], entry["pd_epoch"], entry["draining"]) == ("prefill", 1, False)
    status, back = move(plane, "decode-1", "decode", drain_timeout_s=60)
    assert status == 200, back
    assert back["epoch"] == 2 and back["revision"] == moved["revision"] + 1
    result = bench_finished(load, tmp_path, "flip")
    assert result["completed"] == 40 and result["failed"] == 0

    # no process restarted; each move is an applied revision with the role it set
    units = plane.status("flip")
    assert {n: u.get("pid") for n, u in units.items()} == pids
    for number, serving in ((moved["revision"], {"decode-1": "prefill"}), (back["revision"], {})):
        status, revision = plane.api("GET", f"/deployments/flip/revisions/{number}")
        assert status == 200 and revision["state"] == "applied", revision
        assert revision["spec"]["role_switch"]["serving"] == serving
    status, events = plane.api("GET", "/events?deployment=flip&kind=deployment.role_move")
    assert status == 200 and len(events) == 2, events

    # drain and undrain by hand at the proxy pdctl runs (POST /proxy/{verb})
    other = plane.running("flip")["decode-0"]["url"]
    status, drained = plane.api("POST", "/deployments/flip/proxy/drain", {"instance": "decode-0"})
    assert status == 200 and drained["listed"] is True, drained
    assert proxy_entry(plane, proxy_port, other)["draining"] is True
    status, _ = plane.api("POST", "/deployments/flip/proxy/undrain", {"instance": "decode-0"})
    assert status == 200 and proxy_entry(plane, proxy_port, other)["draining"] is False


def test_every_refused_move_names_its_field(plane):
    for spec in (nixl("flip"), nixl("plain", role_switch=False), nixl("solo", decodes=1)):
        status, created = plane.api("POST", "/deployments", spec)
        assert status == 201, created
    plane.api("POST", "/deployments/flip/start")
    plane.running("flip")

    def refused(name, instance, role, field, words, code=422):
        status, body = move(plane, instance, role, name=name)
        assert status == code, body
        if code == 422:
            assert body["detail"][0]["loc"] == ["body", field], body
            assert words in body["detail"][0]["msg"], body
        else:
            assert words in body["detail"], body

    refused("flip", "decode-9", "prefill", "instance", "no instance 'decode-9'")
    refused("flip", "decode-0", "decode", "role", "already serves decode")
    refused("flip", "prefill-0", "decode", "instance", "last prefill instance")
    refused("flip", "decode-0", "both", "role", "", code=422)
    refused("plain", "decode-0", "prefill", "instance", "not started for runtime role switching")
    refused("solo", "decode-0", "prefill", "instance", "last decode instance")
    refused("solo", "prefill-0", "decode", "instance", "last prefill instance")
    refused("nowhere", "decode-0", "prefill", "", "", code=404)
    # a spec may ask for role switching only with NIXL
    mori = {**nixl("mori"), "connector": "MoRIIOConnector", "prefix_caching": False}
    mori["groups"] = [{**g, "mode": "read"} for g in mori["groups"]]
    status, body = plane.api("POST", "/deployments", mori)
    assert status == 422 and body["detail"][0]["loc"] == ["body", "role_switch"], body
    bad = {**nixl("odd"), "role_switch": {"serving": {"decode-7": "prefill"}}}
    status, body = plane.api("POST", "/deployments", bad)
    assert status == 422 and body["detail"][0]["loc"][:3] == ["body", "role_switch", "serving"]


def test_a_move_the_engine_cannot_drain_fails_naming_the_step_and_serves_on(plane):
    status, created = plane.api("POST", "/deployments", nixl("flip"))
    assert status == 201, created
    plane.api("POST", "/deployments/flip/start")
    url = plane.running("flip")["decode-1"]["url"]
    status, moved = move(plane, "decode-1", "prefill")
    assert status == 200, moved
    # a prefill leg sent straight to it: it holds that KV for a decode that never comes
    leg = {
        "model": "tiny",
        "prompt": "one two three",
        "max_tokens": 1,
        "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False},
    }
    headers = {"X-vLLM-PD-Role": "prefill", "X-vLLM-PD-Epoch": "1"}
    status, answer = http_post(url + "/v1/completions", leg, headers=headers)
    assert status == 200 and answer["kv_transfer_params"], answer
    status, body = move(plane, "decode-1", "decode", drain_timeout_s=1)
    assert status == 502 and "change role on the instance failed" in body["detail"], body
    status, revision = plane.api("GET", f"/deployments/flip/revisions/{moved['revision'] + 1}")
    assert revision["state"] == "failed", revision
    status, current = plane.api("GET", "/deployments/flip")
    assert current["revision"] == moved["revision"]  # the last applied one is desired again
    state = json.loads(http_get(url + "/v1/pd_role")[1])
    assert (state["role"], state["epoch"], state["phase"]) == ("prefill", 1, "ready")
    entry = proxy_entry(plane, created["ports"]["proxy"], url)
    assert (entry["role"], entry["draining"]) == ("prefill", False)
    status, events = plane.api("GET", "/events?deployment=flip&kind=deployment.role_move_failed")
    assert status == 200 and len(events) == 1, events
