"""Plans across nodes on the virtual clock: each hand-off over its pair's link, the inter-node
link slowing TTFT by what it costs, one-node layouts answered as before, `--search` within a
GPU budget, and `pdctl plan`'s errors naming the flag."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import typer
from typer.testing import CliRunner

from domain import profiles
from domain.measures.slo import SloTargets
from simulator.plan import cli as plan_cli
from simulator.plan.planner import (
    PlanSetup,
    Workload,
    make_arrivals,
    parse_config,
    run,
    search,
)

# Llama 3.1 70B in BF16 on H100s over NIXL: 320 KiB of KV a token, NVLink inside a node.
ONE_NODE = PlanSetup("llama-3.1-70b", "h100", gpus=8, slo=SloTargets(400.0, 50.0))
TWO_NODES = replace(ONE_NODE, gpus=16, nodes=2, gpus_per_node=8)
PAIR = parse_config("1p-tp4+1d-tp4:read")
LIGHT = Workload(num_prompts=20, input_len=2000, output_len=20)  # no queueing at 0.5 req/s


def test_a_layout_that_fits_one_node_gives_the_one_node_answer_exactly():
    for config in (PAIR, parse_config("1p-tp4+1d-tp4:write"), parse_config("2xtp4")):
        assert run(TWO_NODES, config, LIGHT, 4.0) == run(ONE_NODE, config, LIGHT, 4.0)
    assert TWO_NODES.cluster(PAIR).pair_links is None  # one link for all, as before nodes


def test_ttft_moves_by_the_difference_of_the_two_links_transfers():
    model = profiles.model("llama-3.1-70b")
    split = replace(TWO_NODES, placement="split")
    # 4 x 400 Gb/s of RDMA beats NVLink here: cuda_ipc posts each of ~20,000 descriptors at
    # ~0.29 us (simulator/model/handoff_paths.py), RDMA at ~0.04 us.
    nvlink, rdma = ONE_NODE.handoff(PAIR), split.pair_links(PAIR)[0][0]
    assert (nvlink.path.name, rdma.path.name) == ("p2p", "rdma")
    assert rdma.transfer_seconds(model, 1999, 16) < nvlink.transfer_seconds(model, 1999, 16)
    # One 100 Gb/s NIC a node: ~52 ms on the wire.
    narrow = replace(split, nics_per_node=1, nic_gbit=100.0)
    link = narrow.pair_links(PAIR)[0][0]
    extra_ms = 1000 * (
        link.transfer_seconds(model, 1999, 16) - nvlink.transfer_seconds(model, 1999, 16)
    )
    assert extra_ms > 40
    inside, across = run(ONE_NODE, PAIR, LIGHT, 0.5), run(narrow, PAIR, LIGHT, 0.5)
    # Read mode: the KV moves after the prefill, so TTFT grows by the transfers' difference;
    # the decode notices a landed KV at its next step (a step of a few ms here).
    assert across["p50_ttft_ms"] - inside["p50_ttft_ms"] == pytest.approx(extra_ms, abs=10)


def test_a_slow_inter_node_link_fails_ttft_where_nvlink_meets_it():
    slow = replace(TWO_NODES, placement="split", nics_per_node=1, nic_gbit=10.0)
    inside, across = run(ONE_NODE, PAIR, LIGHT, 0.5), run(slow, PAIR, LIGHT, 0.5)
    assert inside["failed_target"] == "none" and inside["met_both"] == 20
    assert across["failed_target"] == "ttft" and across["met_ttft"] == 0
    # 1,999 tokens x 320 KiB over one 10 Gb/s NIC: ~0.52 s on the wire.
    assert across["p50_ttft_ms"] > inside["p50_ttft_ms"] + 500


def test_each_pair_hands_off_over_its_own_link():
    setup = replace(TWO_NODES, connector="NixlConnector")
    config = parse_config("3p-tp2+2d-tp4:read")  # D0,D1 on node 0; P0-P2 on node 1
    assert setup.place(config).describe() == "D0,D1 on node 0; P0,P1,P2 on node 1"
    placed = setup.place(parse_config("2p-tp4+2d-tp2:read"))  # the TP4s fill node 0
    assert placed.prefills == (0, 0) and placed.decodes == (1, 1)
    cluster = setup.cluster(parse_config("1p-tp4+3d-tp4:read"))  # P0,D0 node 0; D1,D2 node 1
    assert cluster.pair_links is not None
    arrivals = make_arrivals(LIGHT, 0.5)
    results = {r.request_id: r for r in cluster.run(arrivals)}
    model = profiles.model("llama-3.1-70b")
    for i, arrival in enumerate(arrivals):
        link = cluster.pair_links[0][i % 3]
        expected = link.transfer_seconds(model, len(arrival.prompt_token_ids) - 1, 16)
        assert results[arrival.request_id].transfer_s == pytest.approx(expected)
    assert {cluster.pair_links[0][d].path.name for d in range(3)} == {"p2p", "rdma"}
    # What the result reports per layout: the slowest pair's bandwidth (4 x 400 Gb/s).
    assert setup.link_bytes_per_s(parse_config("1p-tp4+3d-tp4:read")) == 200e9


def test_a_search_ranks_layouts_across_nodes_within_the_budget():
    setup = PlanSetup("llama-3.1-8b", "h100", gpus=4, nodes=2, gpus_per_node=2)
    result = search(setup, Workload(10, 500, 20), [2.0])
    labels = [r["config"] for r in result["ranked"]]
    assert labels and not any("TP4" in c or "TP8" in c for c in labels)  # no TP spans nodes
    assert {r["gpus"] for r in result["rows"]} == {4}
    crossing = [
        name
        for name, where in result["layouts"].items()
        if any(h["link"] == "inter-node" for h in where.get("handoffs", ()))
    ]
    assert "1P-TP2+1D-TP2 write" in crossing  # one TP2 per node: the pair must cross


# -- pdctl plan --------------------------------------------------------------------------------


@pytest.fixture
def app():
    app = typer.Typer()
    plan_cli.register(app)
    return app


SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100", "--num-prompts", "10", "--rate", "2"]


def test_the_cli_plans_across_nodes_and_prints_each_hand_offs_link(app):
    args = [*SMALL, "--nodes", "2", "--config", "1p-tp4+1d-tp4", "--placement", "split"]
    out = CliRunner().invoke(app, ["plan", *args])
    assert out.exit_code == 0, out.output
    assert "P0 on node 0; D0 on node 1; hand-off inter-node rdma 200 GB/s (P0->D0)" in out.output
    doc = json.loads(CliRunner().invoke(app, ["plan", *args, "--nic-gbps", "100", "--json"]).output)
    assert doc["nodes"] == {"count": 2, "gpus_per_node": 8}
    (handoff,) = doc["layouts"]["1P-TP4+1D-TP4 write"]["handoffs"]
    assert (handoff["link"], handoff["gbps"]) == ("inter-node", 50.0)  # 4 NICs x 100 Gb/s


def test_the_cli_search_shows_where_each_layout_runs(app):
    args = [*SMALL, "--nodes", "2", "--gpus-per-node", "2", "--search"]
    out = CliRunner().invoke(app, ["plan", *args])
    assert out.exit_code == 0, out.output
    assert "nodes; hand-off" in out.output and "inter-node" in out.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--nodes", "0"], "--nodes must be between 1 and 64"),
        (["--gpus-per-node", "0", "--nodes", "2"], "--gpus-per-node must be between"),
        (["--gpus-per-node", "4", "--config", "1xtp8"], "--gpus-per-node 4: 1xTP8 has TP8"),
        (["--nodes", "1", "--gpus", "16"], "--gpus 16 is more than --nodes 1"),
        (["--nodes", "2", "--config", "3xtp8"], "needs 24 GPUs, the budget is 16 (--gpus)"),
        (["--nodes", "2", "--gpus-per-node", "6", "--config", "3xtp4"], "--nodes 2: 3xTP4"),
        (["--config", "1p-tp4+1d-tp4", "--placement", "split"], "--placement split"),
        (["--placement", "diagonal"], "--placement must be pack or split"),
        (["--nics-per-node", "0"], "--nics-per-node must be between 1 and 64"),
        (["--nic-gbps", "-5"], "--nic-gbps must be in (0, 100000]"),
    ],
)
def test_cli_node_errors_name_the_flag(app, args, needle):
    out = CliRunner().invoke(app, ["plan", *SMALL, *args])
    assert out.exit_code == 2 and needle in out.output, out.output
