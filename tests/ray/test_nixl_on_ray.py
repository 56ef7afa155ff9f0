"""A NIXL 2P2D stand-in deployment across three workers of a real Ray cluster: spread over the
nodes, each instance on its node's address (and its side channel there too), load through the
proxy, adoption by a restarted `pdctl serve`, and a worker lost under load: the event names the
node, none of the requests is lost, and its instances move to the nodes with free GPUs.
(NIXL has no read/write modes to switch; the switch is MoRIIO's test.)"""

from __future__ import annotations

import time

import pytest

from tests.ray.conftest import (
    bench,
    bench_result,
    events,
    history,
    holders,
    kill_actor,
    listening_addresses,
    listening_on,
    restore,
    serves,
    wait_for,
)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

NODES = ("127.0.0.2", "127.0.0.3", "127.0.0.5")


def nixl_spec(name: str) -> dict:
    placement = {"nodes": [{"address": a} for a in NODES], "gpus_per_instance": 1}
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [
            {"name": "prefill", "role": "prefill", "count": 2, "placement": placement},
            {"name": "decode", "role": "decode", "count": 2, "placement": placement},
        ],
    }


def test_nixl_2p2d_across_three_nodes_adopts_and_survives_a_lost_node(cluster, plane, tmp_path):
    status, created = plane.api("POST", "/deployments", nixl_spec("nixl"))
    assert status == 201, created
    status, body = plane.api("POST", "/deployments/nixl/start")
    assert status == 202, body
    units = plane.running("nixl", 120)
    engines = {n: u for n, u in units.items() if n != "proxy"}
    assert {u["address"] for u in engines.values()} == set(NODES)  # spread over all three
    for name, unit in engines.items():
        assert listening_addresses(unit["ports"]["http"]) == {unit["address"]}, name
        assert listening_addresses(unit["ports"]["side_channel"]) <= {unit["address"]}, name
    proxy_url = units["proxy"]["url"]
    wait_for(lambda: serves(proxy_url), 30, "the proxy routing to every instance")
    result = bench_result(bench(proxy_url, tmp_path, "load", rate=8, prompts=40), tmp_path, "load")
    assert result["completed"] == 40 and result["failed"] == 0, result.get("errors")
    # observe/ scraped the engines at their node addresses: their KV transfer figures.
    wait_for(
        lambda: any((p.get("kv_bytes_per_s") or 0) > 0 for p in history(plane, "nixl")),
        30,
        "KV bytes in the history (engines scraped at their node addresses)",
    )

    # An actor killed takes its engine with it (parent-death signal); the instance returns.
    victim = engines["prefill-1"]
    kill_actor(cluster, "nixl.prefill-1")
    wait_for(
        lambda: not listening_addresses(victim["ports"]["http"]), 20, "the engine gone with it"
    )
    units = plane.wait(
        "nixl",
        lambda us: us["prefill-1"]["state"] == "RUNNING" and us["prefill-1"]["restarts"] >= 1,
        90,
    )
    engines = {n: u for n, u in units.items() if n != "proxy"}

    # `pdctl serve` killed: the same processes adopted.
    pids = {n: (u["pid"], u["node"]) for n, u in units.items()}
    plane.proc.kill()
    plane.start(90)
    adopted = plane.running("nixl", 60)
    assert {n: (u["pid"], u["node"]) for n, u in adopted.items()} == pids

    # The node with two instances is lost under load; they move to the others' free GPUs.
    crowded = max(NODES, key=lambda a: sum(u["address"] == a for u in engines.values()))
    on_it = sorted(n for n, u in engines.items() if u["address"] == crowded)
    load = bench(proxy_url, tmp_path, "lost", rate=6, prompts=60)
    time.sleep(2.0)
    cluster.remove(crowded)
    wait_for(lambda: len(events(plane, "nixl", "node_lost")) >= len(on_it), 60, "node_lost")
    lost = events(plane, "nixl", "node_lost")
    assert all(crowded in e["message"] for e in lost)
    result = bench_result(load, tmp_path, "lost")
    assert result["completed"] + result["failed"] == 60  # none lost
    assert len([e for e in result["errors"] if e]) == result["failed"]  # each says why
    moved = plane.wait(
        "nixl",
        lambda us: all(
            us[n]["state"] == "RUNNING" and us[n]["address"] not in (crowded, None) for n in on_it
        ),
        120,
    )
    wait_for(lambda: not listening_on(crowded), 20, f"nothing on {crowded}: {holders(crowded)}")
    assert {moved[n]["address"] for n in on_it} <= set(NODES) - {crowded}
    wait_for(lambda: serves(proxy_url), 60, "completions through the proxy again")
    after = bench_result(bench(proxy_url, tmp_path, "after", rate=8, prompts=24), tmp_path, "after")
    assert after["completed"] == 24 and after["failed"] == 0, after.get("errors")
    restore(cluster, crowded)
