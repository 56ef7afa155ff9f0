"""POST/GET /api/deployments/{name}/calibration: a bench of the deployment fitted and kept as
its profile (operators only), and every bench the fit cannot use a 422 naming its field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient

from simulator.plan.planner import Workload
from tests.simulator.plan.calibration_bench import planned_bench
from tests.specs import colocated
from tests.web.conftest import AS_OPERATOR, AS_VIEWER, OPERATOR, VIEWER, MakeClient

MODEL = "llama-3.1-8b"
URL = "/api/deployments/cal/calibration"


@pytest.fixture(scope="module")
def benches() -> list[dict[str, Any]]:
    return [
        planned_bench(MODEL, "h100", rate, Workload(30, 1536, 64, seed=seed))
        for rate, seed in ((3.0, 1), (8.0, 2))
    ]


@pytest.fixture
def app(make_client: MakeClient) -> TestClient:
    client = make_client(controller=False, operator_tokens=[OPERATOR], viewer_tokens=[VIEWER])
    body = colocated("cal", model=MODEL, hardware="l40s")
    assert client.post("/api/deployments", json=body, headers=AS_OPERATOR).status_code == 201
    return client


def test_an_operator_fits_and_keeps_the_profile(app: TestClient, benches) -> None:
    assert app.get(URL, headers=AS_VIEWER).status_code == 404
    done = app.post(URL, json={"bench": benches}, headers=AS_OPERATOR)
    assert done.status_code == 201, done.text
    body = done.json()
    assert body["profile"]["hardware"] == "l40s" and body["profile"]["model"] == MODEL
    assert body["report"]["calibrated"]["itl_mape"] < 0.05 < body["report"]["datasheet"]["itl_mape"]
    kept = app.get(URL, headers=AS_VIEWER).json()
    assert (
        kept["actor"] == "operator:alice" and kept["profile"]["steps"] == body["profile"]["steps"]
    )


def test_a_viewer_may_not_calibrate(app: TestClient, benches) -> None:
    assert app.post(URL, json={"bench": benches}, headers=AS_VIEWER).status_code == 403


def _without_records(benches: list[dict]) -> list[dict]:
    out = copy.deepcopy(benches)
    del out[0]["requests"]
    return out


def _other_model(benches: list[dict]) -> list[dict]:
    out = copy.deepcopy(benches)
    out[0]["model_id"] = "qwen2.5-7b-instruct"
    return out


def _few(benches: list[dict]) -> list[dict]:
    out = copy.deepcopy(benches[:1])
    out[0]["requests"] = out[0]["requests"][:2]
    return out


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (lambda b: {"bench": _without_records(b)}, ["body", "bench", "requests"]),
        (lambda b: {"bench": _other_model(b)}, ["body", "bench", "model_id"]),
        (lambda b: {"bench": _few(b)}, ["body", "bench", "requests"]),
        (lambda b: {"bench": b, "hold_out_rate": 5}, ["body", "hold_out_rate"]),
        (lambda b: {"bench": b, "config": "1p-tp2+1d-tp1"}, ["body", "config"]),
        (lambda b: {"source": "bench"}, ["body", "bench"]),
        (lambda b: {"source": "live", "bench": b}, ["body", "bench"]),
        (lambda b: {"source": "live", "hold_out_rate": 3}, ["body", "hold_out_rate"]),
        (lambda b: {"source": "live", "config": "3y"}, ["body", "config"]),
        (lambda b: {"source": "elsewhere"}, ["body", "source"]),
        (lambda b: {"bench": "nope"}, ["body", "bench"]),
    ],
)
def test_a_bench_the_fit_cannot_use_is_a_422_naming_the_field(app, benches, body, loc) -> None:
    done = app.post(URL, json=body(benches), headers=AS_OPERATOR)
    assert done.status_code == 422, done.text
    assert any(item["loc"][: len(loc)] == loc for item in done.json()["detail"]), done.text
    assert app.get(URL, headers=AS_VIEWER).status_code == 404  # nothing kept


def test_an_unknown_deployment_is_a_404(app: TestClient, benches) -> None:
    done = app.post(
        "/api/deployments/nope/calibration", json={"bench": benches}, headers=AS_OPERATOR
    )
    assert done.status_code == 404


@pytest.mark.parametrize(
    ("bench", "loc"),
    [
        ([{"runs": 5}], ["body", "bench", "runs"]),
        ([], ["body", "bench", "runs"]),
        (
            [{"model_id": MODEL, "request_rate": 1, "requests": [{"ok": True}]}],
            ["body", "bench", "requests"],
        ),
        ([{"model_id": MODEL, "request_rate": 1, "requests": [3]}], ["body", "bench", "requests"]),
    ],
)
def test_malformed_benches_are_422s_not_500s(app: TestClient, bench, loc) -> None:
    done = app.post(URL, json={"bench": bench}, headers=AS_OPERATOR)
    assert done.status_code == 422, done.text
    assert done.json()["detail"][0]["loc"] == loc


def test_a_config_the_planner_cannot_read_is_a_422_at_config(app: TestClient, benches) -> None:
    done = app.post(URL, json={"bench": benches, "config": "abc"}, headers=AS_OPERATOR)
    assert done.status_code == 422 and done.json()["detail"][0]["loc"] == ["body", "config"]


def test_a_replay_too_large_to_run_is_a_422_not_a_long_wait(app: TestClient, benches) -> None:
    big = copy.deepcopy(benches)
    big[0]["num_prompts"] = 10**9
    done = app.post(URL, json={"bench": big}, headers=AS_OPERATOR)
    assert done.status_code == 422 and done.json()["detail"][0]["loc"] == [
        "body",
        "bench",
        "num_prompts",
    ]


def test_a_live_calibration_without_a_running_proxy_is_a_409_saying_why(app: TestClient) -> None:
    done = app.post(URL, json={"source": "live"}, headers=AS_OPERATOR)
    assert done.status_code == 409, done.text
    assert "cannot calibrate on its traffic" in done.json()["detail"]
    assert app.get(URL, headers=AS_VIEWER).status_code == 404


PLAN = {"model": MODEL, "hardware": "l40s", "gpus": 1, "configs": ["1xtp1"], "rates": [4]}
PLAN_BODY = {**PLAN, "workload": {"num_prompts": 20, "input_len": 1536, "output_len": 64}}


def test_the_planner_times_engines_on_a_kept_profile_when_asked(app, benches) -> None:
    assert app.post(URL, json={"bench": benches}, headers=AS_OPERATOR).status_code == 201
    datasheet = app.post("/api/plan", json=PLAN_BODY, headers=AS_VIEWER).json()
    done = app.post("/api/plan", json={**PLAN_BODY, "calibration_of": "cal"}, headers=AS_VIEWER)
    assert done.status_code == 200, done.text
    measured = done.json()
    assert measured["calibration"][0]["calibrated"] is True
    assert "a bench of cal" in measured["calibration"][0]["fitted_to"][0]
    assert "calibrated" not in datasheet["calibration"][0]
    # benches of an H100 told L40S: the calibrated ITL is the faster GPU's
    assert measured["rows"][0]["p50_itl_ms"] < 0.7 * datasheet["rows"][0]["p50_itl_ms"]
    page = app.get("/plan", headers=AS_VIEWER).text
    assert '<option value="cal"' in page and "calibrated on cal" in page


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"calibration_of": "cal"}, "has no calibrated profile"),
        ({"calibration_of": "nope"}, "has no calibrated profile"),
    ],
)
def test_a_plan_on_a_missing_profile_is_a_422_at_calibration_of(app, over, needle) -> None:
    done = app.post("/api/plan", json={**PLAN_BODY, **over}, headers=AS_VIEWER)
    assert done.status_code == 422, done.text
    item = done.json()["detail"][0]
    assert item["loc"] == ["body", "calibration_of"] and needle in item["msg"]


def test_a_profile_of_other_hardware_is_a_422_naming_both(app, benches) -> None:
    assert app.post(URL, json={"bench": benches}, headers=AS_OPERATOR).status_code == 201
    done = app.post(
        "/api/plan",
        json={**PLAN_BODY, "hardware": "h100", "calibration_of": "cal"},
        headers=AS_VIEWER,
    )
    assert done.status_code == 422, done.text
    item = done.json()["detail"][0]
    assert item["loc"] == ["body", "calibration_of"] and "on l40s, not" in item["msg"]
