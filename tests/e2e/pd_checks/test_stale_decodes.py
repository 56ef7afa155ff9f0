"""A prefill restart with no traffic at all: each decode that kept the old prefill's agent is
found by the controller's pair check (a canary pinned to the pair through the proxy) and
restarted, one at a time, with an event that says so (prefill-1 is the control: the decodes
serve it). The stand-ins keep stale agents (`--kv-stale-peer hang`, as released NIXL and
MoRIIO do)."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

from domain.canary_marks import HEADER, PAIR_HEADER
from harness.control_plane import ControlPlane
from harness.processes import http_post
from harness.stack import wait_until

pytestmark = pytest.mark.e2e

NAME = "stale"


@pytest.fixture
def plane(tmp_path):
    plane = ControlPlane(tmp_path)
    plane.env |= {"PDCTL_SIM_KV_STALE_PEER": "hang"}
    plane.start()
    try:
        yield plane
    finally:
        with contextlib.suppress(OSError):
            plane.api("POST", f"/deployments/{NAME}/stop")
        with contextlib.suppress(TimeoutError):
            plane.wait(NAME, lambda us: all(u["state"] != "RUNNING" for u in us.values()), 30)
        plane.close()


def spec() -> dict:
    return {
        "name": NAME,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "prefix_caching": False,
        "kv_connector_extra_config": {"transfer_timeout": "3"},
        "groups": [
            {"name": "prefill", "role": "prefill", "mode": "read", "count": 2},
            {"name": "decode", "role": "decode", "mode": "read", "count": 2},
        ],
        "proxy": {"decode_timeout_s": 4, "first_byte_timeout_s": 1},
    }


def pinned(proxy: str, token: str, prefill: str, decode: str) -> tuple[int, dict]:
    body = {"model": "tiny", "prompt": "meet", "max_tokens": 2, "stream": False}
    headers = {HEADER: token, PAIR_HEADER: f"{prefill} {decode}"}
    return http_post(proxy + "/v1/completions", body, 30, headers)


def stale_events(plane: ControlPlane) -> list[str]:
    _, events = plane.api("GET", f"/events?deployment={NAME}&kind=stale_peer")
    return [e["message"] for e in events]


def test_every_stale_decode_is_found_and_restarted_without_traffic(plane):
    status, created = plane.api("POST", "/deployments", spec())
    assert status == 201, created
    plane.api("POST", f"/deployments/{NAME}/start")
    units = plane.running(NAME, timeout=60)
    proxy = f"http://127.0.0.1:{created['ports']['proxy']}"
    token = plane.admin_headers(NAME)["Authorization"].split(" ", 1)[1]
    prefill, decodes = units["prefill-0"]["url"], ["decode-0", "decode-1"]
    wait_until(lambda: pinned(proxy, token, prefill, units["decode-0"]["url"])[0] == 200, 20, "")
    for d in decodes:  # each decode meets prefill-0: it now holds that engine's agent
        status, answer = pinned(proxy, token, prefill, units[d]["url"])
        assert status == 200, answer
    # Only the control plane pins: without its token the pin is refused, naming the header.
    status, answer = pinned(proxy, "not-the-token", prefill, units["decode-0"]["url"])
    assert status == 401 and PAIR_HEADER in answer["error"]["message"]

    before = {d: units[d]["pid"] for d in decodes}
    os.kill(units["prefill-0"]["pid"], signal.SIGKILL)
    began = time.monotonic()

    def both_restarted() -> bool:
        now = plane.status(NAME)
        fresh = all(now[d]["pid"] not in (None, before[d]) for d in decodes)
        return fresh and all(now[d]["state"] == "RUNNING" for d in decodes)

    wait_until(both_restarted, 60, "both decodes restarted")
    took = time.monotonic() - began
    found = stale_events(plane)
    assert sorted(m.split(": restarting")[0] for m in found) == [f"{NAME}/{d}" for d in decodes]
    assert all("pinned to the restarted prefill-0" in m for m in found), found
    assert took < 60
    # the restarted decodes hold the new prefill's agent: the pair serves again
    units = plane.status(NAME)
    for d in decodes:
        assert pinned(proxy, token, units["prefill-0"]["url"], units[d]["url"])[0] == 200
