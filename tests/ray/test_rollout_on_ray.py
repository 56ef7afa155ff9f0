"""Issue 34's Ray case: a decode group pinned to one node, that node lost. The decode is FATAL
and the event names the fix; the operator stores a revision without the pin, and its rollout
restarts the decode alone, on a node that fits, while the healthy prefill runs on untouched.
The time from the fixed revision to serving is measured and printed for the closing note."""

from __future__ import annotations

import time

import pytest

from tests.ray.conftest import events, restore, serves, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

PREFILL, DECODE, SPARE = "127.0.0.2", "127.0.0.3", "127.0.0.5"


def pinned_spec(name: str, decode_nodes: list[str]) -> dict:
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "prefix_caching": False,
        "groups": [
            {
                "name": "prefill",
                "role": "prefill",
                "mode": "read",
                "placement": {"nodes": [{"address": PREFILL}]},
            },
            {
                "name": "decode",
                "role": "decode",
                "mode": "read",
                "placement": {"nodes": [{"address": a} for a in decode_nodes]},
            },
        ],
        "proxy": {"hold_queue": 256, "hold_deadline_s": 60},
    }


def test_a_lost_pinned_node_is_fixed_by_a_revision_that_restarts_only_the_decode(cluster, plane):
    status, created = plane.api("POST", "/deployments", pinned_spec("pin", [DECODE]))
    assert status == 201, created
    assert plane.api("POST", "/deployments/pin/start")[0] == 202
    units = plane.running("pin", 120)
    plane.rolled_out("pin")
    assert units["decode-0"]["address"] == DECODE
    proxy_url = units["proxy"]["url"]
    wait_for(lambda: serves(proxy_url), 30, "the proxy routing to every instance")
    prefill = (units["prefill-0"]["pid"], units["prefill-0"]["restarts"])

    cluster.remove(DECODE)
    try:
        # Pinned to the lost node: nothing fits, so FATAL, and the event says what to fix.
        fatal = plane.wait("pin", lambda us: us["decode-0"]["state"] == "FATAL", 120)
        assert fatal["prefill-0"]["state"] == "RUNNING"
        said = " ".join(e["message"] for e in events(plane, "pin", "fatal"))
        assert "no node fits" in said and "placement" in said, said
        status, truth = plane.api("GET", "/deployments/pin/rollout")
        assert status == 200 and "decode-0" in truth["drifted"], truth
        assert not truth["applied"]

        # The fix is a revision like any other: the pin lifted, rolled out.
        fixed = pinned_spec("pin", [DECODE, SPARE])
        began = time.monotonic()
        status, stored = plane.api("PUT", "/deployments/pin", fixed)
        assert status == 200, stored
        rollout = stored["rollout"]
        assert rollout is not None and rollout["changes"]["restart"] == ["decode-0"], rollout
        assert "prefill-0" in rollout["changes"]["keep"]
        done = plane.rolled_out("pin", 180)
        after = plane.running("pin", 60)
        wait_for(lambda: serves(proxy_url), 60, "completions through the proxy again")
        took = time.monotonic() - began
        print(f"\nfix to serving: {took:.1f} s (rollout {done['id']} by {done['strategy']})")

        assert after["decode-0"]["address"] == SPARE
        assert (after["prefill-0"]["pid"], after["prefill-0"]["restarts"]) == prefill
        status, truth = plane.api("GET", "/deployments/pin/rollout")
        assert truth["applied"] and truth["desired_revision"] == stored["revision"], truth
        assert {i["revision"] for i in truth["instances"]} == {stored["revision"]}
        assert took < 120
    finally:
        restore(cluster, DECODE)
