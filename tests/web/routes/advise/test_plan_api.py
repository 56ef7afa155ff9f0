"""POST /api/plan and GET /api/kv: the planner and the KV calculator over HTTP, their 422s
naming the field, their bounds, and who may call them."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from services import plan_runner, plan_schema
from tests.web.conftest import AS_OPERATOR, AS_VIEWER, OPERATOR, VIEWER, MakeClient

SMALL = {"workload": {"num_prompts": 20}}  # fast: 4 configurations x 1 rate x 20 requests
ROW_KEYS = {
    "config",
    "rate",
    "requests",
    "met_ttft",
    "met_itl",
    "met_both",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "p50_itl_ms",
    "p99_itl_ms",
    "failed_target",
    "slo_attainment",
}


@pytest.fixture(scope="module")
def api(make_module_client: MakeClient) -> TestClient:
    return make_module_client(controller=False)


def test_defaults_are_the_mori_io_setup_at_its_published_rate(api):
    result = api.post("/api/plan", json=SMALL).json()
    assert [r["config"] for r in result["rows"]] == [
        "colocated-tp8",
        "colocated-2xtp4",
        "disagg-read",
        "disagg-write",
    ]
    assert all(
        set(r) >= ROW_KEYS and r["rate"] == 8.0 and r["requests"] == 20 for r in result["rows"]
    )
    assert set(result["max_goodput_rate"]) == {r["config"] for r in result["rows"]}
    assert result["calibration"] and result["calibration"][0]["fitted_to"]
    assert result["workload"]["input_len"] == 2000 and result["model"] == "qwen3-235b-a22b-fp8"
    assert result["topologies"]["disagg-read"] == "disaggregated"
    assert result["links_gbps"]["disagg-write"] > 0 and "colocated-tp8" not in result["links_gbps"]
    assert result["slo"] == {"ttft_ms": 1000.0, "itl_ms": 50.0, "itl_stat": "p99"}


def test_a_rate_range_is_spelled_out_and_sorted(api):
    body = {**SMALL, "configs": ["2xtp4"], "rates": "2:6:2"}
    rows = api.post("/api/plan", json=body).json()["rows"]
    assert [r["rate"] for r in rows] == [2.0, 4.0, 6.0]
    assert api.post("/api/plan", json={**body, "rates": [6, 2, 2]}).json()["rows"][0]["rate"] == 2


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"configs": ["zz"]}, ["body", "configs", 0]),
        ({"configs": ["2xtp4", "4xtp4"]}, ["body", "configs", 1]),  # 16 GPUs on an 8-GPU node
        ({"configs": ["8xtp1"]}, ["body", "configs", 0]),  # the model does not fit on TP1
        ({"configs": []}, ["body", "configs"]),
        ({"rates": "0.1:100:0.001"}, ["body", "rates"]),
        ({"rates": "abc"}, ["body", "rates"]),
        ({"rates": [0]}, ["body", "rates"]),
        ({"rates": list(range(1, 22))}, ["body", "rates"]),
        ({"configs": ["1xtp8"] * 5, "rates": "1:20:1"}, ["body", "rates"]),  # 100 runs > 80
        (
            {"workload": {"num_prompts": plan_schema.MAX_PROMPTS + 1}},
            ["body", "workload", "num_prompts"],
        ),
        ({"workload": {"input_len": 0}}, ["body", "workload", "input_len"]),
        ({"workload": {"burstiness": 0}}, ["body", "workload", "burstiness"]),
        ({"slo": {"itl_stat": "p50"}}, ["body", "slo", "itl_stat"]),
        ({"model": "gpt-5"}, ["body", "model"]),
        ({"hardware": "tpu"}, ["body", "hardware"]),
        ({"scenario": "nope"}, ["body", "scenario"]),
        ({"goodput_share": 1.5}, ["body", "goodput_share"]),
        ({"prefill_flags": {"max_num_seqs": 0}}, ["body", "prefill_flags", "max_num_seqs"]),
        ({"surprise": 1}, ["body", "surprise"]),
        ({"nodes": 0}, ["body", "nodes"]),
        ({"gpus_per_node": 0}, ["body", "gpus_per_node"]),
        ({"nics_per_node": 0}, ["body", "nics_per_node"]),
        ({"nic_gbps": -1}, ["body", "nic_gbps"]),
        ({"placement": "diagonal"}, ["body", "placement"]),
        ({"nodes": 1, "gpus": 16}, ["body", "gpus"]),  # more than 1 node x 8
        ({"gpus_per_node": 4, "nodes": 2, "configs": ["1xtp8"]}, ["body", "configs", 0]),
        ({"configs": ["disagg-write"], "placement": "split"}, ["body", "configs", 0]),  # 1 node
    ],
)
def test_bad_input_is_a_422_naming_the_field(api, body, loc):
    response = api.post("/api/plan", json=body)
    assert response.status_code == 422
    assert loc in [item["loc"] for item in response.json()["detail"]], response.json()


def test_a_config_that_does_not_fit_says_why(api):
    detail = api.post("/api/plan", json={"configs": ["4xtp4"]}).json()["detail"]
    assert "needs 16 GPUs, the node has 8" in detail[0]["msg"]


def test_a_plan_across_nodes_says_which_link_each_hand_off_takes(api):
    body = {
        **SMALL,
        "model": "llama-3.1-8b",
        "hardware": "h100",
        "nodes": 2,
        "placement": "split",
        "configs": ["1p-tp4+1d-tp4", "2xtp4"],
    }
    result = api.post("/api/plan", json=body).json()
    assert (result["gpus"], result["nodes"]) == (16, 2)  # no budget given: all the nodes'
    layout = result["layouts"]["1P-TP4+1D-TP4 write"]
    assert layout["nodes"] == "P0 on node 0; D0 on node 1"
    assert layout["handoffs"] == [
        {"link": "inter-node", "path": "rdma", "gbps": 200.0, "pairs": ["P0->D0"]}
    ]
    gpus_too_many = api.post("/api/plan", json={**body, "gpus": 24}).json()["detail"][0]
    assert gpus_too_many["loc"] == ["body", "gpus"] and "--nodes 2 x" in gpus_too_many["msg"]


def test_search_ranks_the_layouts_that_fit_and_says_why_the_winner_wins(api):
    result = api.post("/api/plan", json={**SMALL, "search": True, "rates": [4, 8]}).json()
    ranked = [r["config"] for r in result["ranked"]]
    assert {"1xTP8", "2xTP4", "4xTP2", "1P-TP4+1D-TP4 write"} <= set(ranked)
    assert not any("TP1" in c for c in ranked)  # 235B in FP8 does not fit one MI300X
    assert ranked[0] in result["reason"]
    assert len(result["rows"]) == len(ranked) * 2 and result["mode"] == "search"


def test_the_saturation_scenario_runs_as_built_in(api):
    result = api.post("/api/plan", json={"scenario": "saturation"}).json()
    assert result["scenario"] == "saturation"
    assert {r["config"] for r in result["saturation"]} >= {"colocated-tp8", "disagg-write"}
    assert "throughput" in result["verdict"]


def test_a_sweep_past_its_deadline_stops_starting_runs_and_says_so(api, monkeypatch):
    monkeypatch.setattr(api.app.state.settings, "plan_deadline_s", 1e-9)  # PDCTL_PLAN_DEADLINE_S
    result = api.post("/api/plan", json={**SMALL, "configs": ["2xtp4"], "rates": [4, 8]}).json()
    assert result["rows"] == [] and "2 of 2 runs not started" in result["truncated"]
    assert "stopped after 1e-09 s" in result["truncated"]


def test_the_runner_stops_at_its_own_deadline_when_none_is_given(monkeypatch):
    monkeypatch.setattr(plan_runner, "DEADLINE_S", 0.0)
    req = plan_schema.PlanRequest(**{**SMALL, "configs": ["2xtp4"], "rates": [4]})
    assert "1 of 1 runs not started" in plan_runner.execute(req)["truncated"]


def test_one_plan_at_a_time_the_next_is_told_to_retry(api):
    api.app.state.plan_running = True
    try:
        response = api.post("/api/plan", json=SMALL)
    finally:
        api.app.state.plan_running = False
    assert response.status_code == 429 and response.headers["retry-after"] == "5"
    assert "already running" in response.json()["detail"]


# -- the KV calculator ------------------------------------------------------------------------


def test_llama_70b_bf16_10k_tokens_is_about_3_3_gb(api):
    report = api.get("/api/kv", params={"model": "llama-3.1-70b", "tokens": 10_000}).json()
    assert report["kv_bytes"] == 10_000 * 327_680
    assert report["kv_gb"] == pytest.approx(3.3, abs=0.05)
    assert report["rdma_transfer_ms"] > report["in_node_transfer_ms"] > 0  # NIC vs NVLink


def test_kv_without_peer_to_peer_goes_through_host_memory_and_is_slower(api):
    p2p = api.get("/api/kv", params={"p2p": "true"}).json()
    host = api.get("/api/kv", params={"p2p": "false", "link_gbps": 50}).json()
    assert host["p2p"] is False and "host memory" in host["in_node_path"]
    assert host["in_node_transfer_ms"] > p2p["in_node_transfer_ms"]
    assert host["given_link_transfer_ms"] == pytest.approx(3.2768e9 / 50e9 * 1000, rel=1e-3)


def test_kv_shows_the_hand_off_parts_per_path_and_which_one_is_taken(api):
    params = {"model": "llama-3.1-8b", "tokens": 2048, "hardware": "l40s"}
    l40s = api.get("/api/kv", params=params).json()
    [host] = l40s["handoff"]  # no RDMA NIC, no P2P: only the staged path
    assert host["path"] == "host" == l40s["path_in_node"] == l40s["path_across_nodes"]
    assert host["descriptors"] == 128 * 32 * 2 and l40s["block_size"] == 16
    assert host["times_bandwidth"] > 20
    parts = ("setup_ms", "post_ms", "staging_ms", "wire_ms", "notice_ms")
    assert host["total_ms"] == pytest.approx(sum(host[p] for p in parts), abs=0.01)
    h100 = api.get("/api/kv", params={**params, "hardware": "h100", "decode_step_ms": 20}).json()
    assert [r["path"] for r in h100["handoff"]] == ["rdma", "p2p", "host"]
    assert h100["path_in_node"] == "p2p" and h100["path_across_nodes"] == "rdma"
    assert all(r["notice_ms"] == 10.0 for r in h100["handoff"])
    mori = api.get("/api/kv", params={**params, "hardware": "mi300x", "connector": "moriio"})
    assert mori.json()["path_in_node"] == "rdma"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"connector": "ucx"}, "connector"),
        ({"block_size": 0}, "block_size"),
        ({"decode_step_ms": -1}, "decode_step_ms"),
        ({"model": "gpt-5"}, "model"),
        ({"hardware": "tpu"}, "hardware"),
        ({"tokens": 0}, "tokens"),
        ({"tp": 0}, "tp"),
        ({"link_gbps": -1}, "link_gbps"),
        ({"p2p": "maybe"}, "p2p"),
    ],
)
def test_kv_bad_query_is_a_422_naming_the_field(api, params, field):
    response = api.get("/api/kv", params=params)
    assert response.status_code == 422
    assert ["query", field] in [item["loc"] for item in response.json()["detail"]]


# -- who may plan -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured_api(make_module_client: MakeClient) -> TestClient:
    return make_module_client(controller=False, operator_tokens=[OPERATOR], viewer_tokens=[VIEWER])


@pytest.mark.parametrize("call", [("POST", "/api/plan"), ("GET", "/api/kv")])
def test_planning_needs_a_token_and_a_viewer_may_plan(secured_api, call):
    method, path = call
    body = {**SMALL, "configs": ["2xtp4"]} if method == "POST" else None
    assert secured_api.request(method, path, json=body).status_code == 401
    for headers in (AS_VIEWER, AS_OPERATOR):
        assert secured_api.request(method, path, json=body, headers=headers).status_code == 200
