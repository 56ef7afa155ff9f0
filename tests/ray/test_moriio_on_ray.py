"""A MoRIIO 1P1D stand-in deployment on a real Ray cluster: prefill on one worker, decode on
another, each listening on its node's address only; load through the proxy, a read-to-write
switch under load with nothing lost, `pdctl serve` killed and restarted adopting every
instance, and a worker lost under load: the event names the node, in-flight requests end with
an error, none is lost, and the decode comes back on the spare node."""

from __future__ import annotations

import time

import pytest

from tests.ray.conftest import (
    bench,
    bench_result,
    events,
    holders,
    listening_addresses,
    listening_on,
    restore,
    serves,
    wait_for,
)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

PREFILL, DECODE, SPARE = "127.0.0.2", "127.0.0.3", "127.0.0.5"


def moriio_spec(name: str) -> dict:
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
                "placement": {"nodes": [{"address": DECODE}, {"address": SPARE}]},
            },
        ],
        "proxy": {"hold_queue": 256, "hold_deadline_s": 60},
    }


def test_moriio_pair_across_nodes_switches_adopts_and_survives_a_lost_node(
    cluster, plane, tmp_path
):
    status, created = plane.api("POST", "/deployments", moriio_spec("mori"))
    assert status == 201, created
    status, body = plane.api("POST", "/deployments/mori/start")
    assert status == 202, body
    units = plane.running("mori", 120)
    assert units["prefill-0"]["address"] == PREFILL
    assert units["decode-0"]["address"] == DECODE
    assert units["prefill-0"]["node"] != units["decode-0"]["node"]
    for name, address in (("prefill-0", PREFILL), ("decode-0", DECODE)):
        port = units[name]["ports"]["http"]
        assert units[name]["url"] == f"http://{address}:{port}"
        assert listening_addresses(port) == {address}, name  # its node's address only
    proxy_url = units["proxy"]["url"]
    # Logs come through the actor on the instance's node.
    status, logs = plane.api("GET", "/deployments/mori/logs/decode-0?lines=50")
    assert status == 200 and logs["lines"], logs
    wait_for(lambda: serves(proxy_url), 30, "the proxy routing to every instance")

    # Load through the proxy, and a read -> write roll under load: nothing lost.
    load = bench(proxy_url, tmp_path, "roll", rate=8, prompts=48)
    time.sleep(1.0)
    record = plane.switch("mori", "write", "hold", timeout=180)
    assert record["state"] == "done", (record.get("error"), record.get("failed_step"))
    result = bench_result(load, tmp_path, "roll")
    assert result["completed"] == 48 and result["failed"] == 0, result.get("errors")
    units = plane.running("mori")
    assert {units[n]["mode"] for n in ("prefill-0", "decode-0")} == {"write"}
    assert units["decode-0"]["address"] == DECODE  # a switch keeps each instance's node
    load = bench(proxy_url, tmp_path, "keep", rate=8, prompts=40)
    time.sleep(1.0)
    record = plane.switch("mori", "read", "keep-serving", timeout=180)
    assert record["state"] == "done", (record.get("error"), record.get("failed_step"))
    result = bench_result(load, tmp_path, "keep")
    assert result["completed"] == 40 and result["failed"] == 0, result.get("errors")
    units = plane.running("mori")

    # `pdctl serve` killed: a new one finds every actor by name and adopts the same processes.
    pids = {n: (u["pid"], u["node"]) for n, u in units.items()}
    plane.proc.kill()
    plane.start(90)
    adopted = plane.running("mori", 60)
    assert {n: (u["pid"], u["node"]) for n, u in adopted.items()} == pids
    assert all(u["restarts"] == units[n]["restarts"] for n, u in adopted.items())
    wait_for(lambda: serves(proxy_url), 30, "the proxy routing to every instance")

    # The decode's node is lost under load.
    load = bench(proxy_url, tmp_path, "lost", rate=6, prompts=60)
    time.sleep(2.0)
    cluster.remove(DECODE)
    lost = wait_for(lambda: events(plane, "mori", "node_lost"), 60, "a node_lost event")
    assert DECODE in lost[-1]["message"] and "decode-0" in lost[-1]["message"]
    result = bench_result(load, tmp_path, "lost")
    assert result["completed"] + result["failed"] == 60  # none lost
    errors = [e for e in result.get("errors", []) if e]
    assert len(errors) == result["failed"]  # every failure says why
    moved = plane.wait(
        "mori",
        lambda us: us["decode-0"]["state"] == "RUNNING" and us["decode-0"]["address"] == SPARE,
        120,
    )
    assert moved["decode-0"]["url"].startswith(f"http://{SPARE}:")
    wait_for(lambda: not listening_on(DECODE), 20, f"nothing on {DECODE}: {holders(DECODE)}")
    replaced = events(plane, "mori", "replaced")
    assert replaced and SPARE in replaced[-1]["message"]
    wait_for(lambda: serves(proxy_url), 60, "completions through the proxy again")
    restore(cluster, DECODE)
