"""The advisor over HTTP: live advice of a deployment from its frame and history, advice on
given signals and on bench and plan documents, the deployment page's panel, 404s and 422s
naming the field, and who may ask."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from observe.scrape.settings import kv_bytes_per_token
from state.history import History
from tests.specs import nixl_1p1d
from tests.web.conftest import AS_OPERATOR, AS_VIEWER, OPERATOR, VIEWER, MakeClient

HX = {"HX-Request": "true"}


class FakeObserver:
    """What the advice route asks of observe/scrape/observer.py's Observer: the latest frame."""

    def __init__(self, frames: dict[str, dict]) -> None:
        self.frames = frames

    def frame(self, name: str, window: str = "1m") -> dict | None:
        f = self.frames.get(name)
        return {**f, "window": window} if f else None

    async def close(self) -> None:
        return None


def live_frame(name: str) -> dict:
    """4 req/s of 2,000-token prompts whose KV moves over NIXL in 50 ms; TTFT over target."""
    per_token = kv_bytes_per_token("tiny")
    return {
        "type": "frame",
        "deployment": name,
        "ts": time.time(),
        "window": "1m",
        "slo": {"ttft_ms": 1000.0, "itl_ms": 50.0, "itl_stat": "p99"},
        "ttft": {"buckets": [], "count": 240, "p50": 0.5, "p90": 1.1, "p99": 1.5},
        "itl": {"buckets": [], "count": 9000, "p50": 0.02, "p90": 0.03, "p99": 0.04},
        "slo_attainment": 0.7,
        "request_rate": 4.0,
        "kv": {
            "bytes_per_s": 4.0 * 2000 * per_token,
            "source": "nixl",
            "xfer_p50_ms": 50.0,
            "xfer_p99_ms": 80.0,
        },
        "running": 12,
        "waiting": 0,
    }


@pytest.fixture
def plane(pd_and_solo: TestClient) -> TestClient:
    return pd_and_solo


def rule(result: dict, name: str) -> dict:
    return next(v for v in result["verdicts"] if v["rule"] == name)


def test_unknown_deployment_is_404(plane):
    assert plane.get("/api/deployments/nope/advice").status_code == 404
    assert plane.get("/deployments/nope/advice", headers=HX).status_code == 404


def test_without_a_live_frame_every_measured_rule_says_no_signal(plane):
    result = plane.get("/api/deployments/pd/advice").json()
    assert result["live"] is False and result["deployment"] == "pd"
    assert result["signals"] == {
        "topology": "disaggregated",
        "slo_ttft_ms": 1000.0,
        "slo_itl_ms": 50.0,
    }
    assert all(
        v["triggered"] is None and v["advice"].startswith("no signal") for v in result["verdicts"]
    )
    assert "not running" in rule(result, "ttft_binding")["sources"]["ttft_p99_ms"]


def test_live_advice_reads_the_frame_and_the_windows_history(plane):
    plane.app.state.observer = FakeObserver({"pd": live_frame("pd")})
    now = time.time()
    History(plane.app.state.store.engine).write(
        [("pd", now - 20, {"running": 10}), ("pd", now - 10, {"running": 30})]
    )
    result = plane.get("/api/deployments/pd/advice", params={"window": "1m"}).json()
    assert result["live"] is True and result["window"] == "1m"
    assert result["signals"]["concurrency_mean"] == 20
    assert result["signals"]["prompt_tokens_mean"] == pytest.approx(2000)
    ttft = rule(result, "ttft_binding")
    assert ttft["triggered"] is True
    assert ttft["evidence"] == {"ttft_p99_ms": 1500.0, "slo_ttft_ms": 1000.0, "itl_p99_ms": 40.0}
    assert ttft["sources"]["ttft_p99_ms"].startswith("proxy TTFT histogram p99")
    assert rule(result, "slow_kv_transfer")["triggered"] is False  # 50 ms of a 500 ms TTFT
    assert rule(result, "itl_interference")["triggered"] is None
    assert "no ITL spike counts" in result["absent"]["spike_prefill_overlap"]


def test_a_bad_window_is_a_422_naming_it(plane):
    response = plane.get("/api/deployments/pd/advice", params={"window": "2h"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "window"]


def test_the_deployment_page_polls_its_advisor_panel(plane):
    page = plane.get("/deployments/solo").text
    assert 'id="advisor"' in page and 'hx-get="/deployments/solo/advice"' in page
    assert "Waiting for the first verdicts" in page
    plane.app.state.observer = FakeObserver({"solo": live_frame("solo")})
    fragment = plane.get("/deployments/solo/advice", headers=HX)
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert 'data-rule="ttft_binding" data-triggered="true"' in fragment.text
    assert 'data-rule="itl_interference" data-triggered="null"' in fragment.text
    assert 'data-advice-live="1"' in fragment.text and "ttft_p99_ms = 1.5e+03" in fragment.text


# -- POST /api/advice ---------------------------------------------------------------------------


def test_advice_on_given_signals(plane):
    body = {
        "signals": {
            "itl_p99_ms": 150,
            "slo_itl_ms": 50,
            "spike_prefill_overlap": 0.9,
            "topology": "colocated",
        }
    }
    result = plane.post("/api/advice", json=body).json()
    assert result["source"] == "signals" and len(result["results"]) == 1
    verdict = rule(result["results"][0], "itl_interference")
    assert verdict["triggered"] is True and verdict["sources"]["itl_p99_ms"] == "given"


BENCH_RUN = {
    "request_rate": 8.0,
    "burstiness": 1.0,
    "dataset": "random",
    "completed": 100,
    "total_input_tokens": 200_000,
    "request_throughput": 2.5,
    "mean_e2el_ms": 40_000,
    "p99_ttft_ms": 600.0,
    "p99_itl_ms": 180.0,
    "median_itl_ms": 32.0,
    "slo_ttft_ms": 1000.0,
    "slo_itl_ms": 50.0,
    "slo_attainment": 0.26,
}


def test_advice_on_each_run_of_a_bench_sweep_or_the_one_asked_for(plane):
    sweep = {"goodput_share": 0.9, "runs": [{**BENCH_RUN, "request_rate": 0.5}, BENCH_RUN]}
    result = plane.post("/api/advice", json={"bench": sweep, "topology": "colocated"}).json()
    assert [r["label"] for r in result["results"]] == ["0.5 req/s", "8 req/s"]
    light = rule(result["results"][0], "light_traffic")
    assert light["triggered"] is True and "low rate" in light["advice"]
    one = plane.post("/api/advice", json={"bench": sweep, "rate": 8}).json()["results"]
    assert len(one) == 1 and one[0]["signals"]["concurrency_mean"] == pytest.approx(100)
    single = plane.post("/api/advice", json={"bench": BENCH_RUN}).json()["results"]
    assert single[0]["label"] == "8 req/s"


def test_advice_on_a_plan_result_per_row(plane):
    result = plane.post(
        "/api/plan",
        json={"workload": {"num_prompts": 20}, "configs": ["colocated-tp8", "disagg-write"]},
    ).json()
    advice = plane.post("/api/advice", json={"plan": result}).json()
    assert [r["label"] for r in advice["results"]] == [
        "colocated-tp8 @ 8 req/s",
        "disagg-write @ 8 req/s",
    ]
    disagg = advice["results"][1]
    assert disagg["signals"]["topology"] == "disaggregated"
    assert disagg["signals"]["kv_transfer_gbps"] == result["links_gbps"]["disagg-write"]
    only = plane.post("/api/advice", json={"plan": result, "config": "colocated-tp8"}).json()
    assert [r["label"] for r in only["results"]] == ["colocated-tp8 @ 8 req/s"]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({}, ["body"]),
        ({"signals": {}, "bench": BENCH_RUN}, ["body"]),
        ({"signals": {"vibes": 1}}, ["body", "signals", "vibes"]),
        ({"signals": {"prefix_hit_rate": 2}}, ["body", "signals", "prefix_hit_rate"]),
        ({"signals": {"topology": "mesh"}}, ["body", "signals", "topology"]),
        ({"plan": {"rows": "many"}}, ["body", "plan", "rows"]),
        ({"bench": {"runs": [1, 2]}}, ["body", "bench", "runs"]),
        ({"bench": BENCH_RUN, "rate": 3}, ["body", "rate"]),
        ({"bench": BENCH_RUN, "rate": -1}, ["body", "rate"]),
    ],
)
def test_bad_advice_requests_are_422s_naming_the_field(plane, body, loc):
    response = plane.post("/api/advice", json=body)
    assert response.status_code == 422
    assert loc in [item["loc"] for item in response.json()["detail"]], response.json()


@pytest.mark.parametrize(
    "body",
    [
        {
            "plan": {
                "rows": [{"config": ["x"], "rate": "8"}],
                "slo": [],
                "workload": 3,
                "topologies": "all",
                "links_gbps": None,
            }
        },
        {
            "bench": {
                "request_rate": {"r": 1},
                "completed": "lots",
                "dataset": ["random"],
                "p99_ttft_ms": 1e308,
                "mean_e2el_ms": -1,
            }
        },
    ],
)
def test_junk_documents_give_absent_signals_not_errors(plane, body):
    response = plane.post("/api/advice", json=body)
    assert response.status_code == 200
    assert all(
        v["triggered"] is None
        for v in response.json()["results"][0]["verdicts"]
        if v["rule"] != "multi_turn"
    )


# -- who may ask --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured_plane(make_module_client: MakeClient) -> TestClient:
    client = make_module_client(
        controller=False, operator_tokens=[OPERATOR], viewer_tokens=[VIEWER]
    )
    assert client.post("/api/deployments", json=nixl_1p1d(), headers=AS_OPERATOR).status_code == 201
    return client


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/deployments/pd/advice", None),
        ("POST", "/api/advice", {"signals": {"request_rate": 0.2, "prompt_tokens_mean": 100}}),
    ],
)
def test_advice_needs_a_token_and_a_viewer_may_read_it(secured_plane, method, path, body):
    assert secured_plane.request(method, path, json=body).status_code == 401
    assert (
        secured_plane.request(
            method, path, json=body, headers={"Authorization": "Bearer wrong"}
        ).status_code
        == 401
    )
    assert secured_plane.request(method, path, json=body, headers=AS_VIEWER).status_code == 200


def test_the_panel_fragment_sends_a_browser_without_a_token_to_login(secured_plane):
    response = secured_plane.get("/deployments/pd/advice", headers=HX)
    assert response.status_code == 401 and response.headers["hx-redirect"] == "/login"
