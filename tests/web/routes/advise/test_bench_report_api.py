"""POST /api/deployments/{name}/bench/runs: a run `pdctl bench --deployment NAME` made from a
terminal, kept as the dashboard's own runs are (listed, in the page's Bench panel, an event),
and every refusal naming its field."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.specs import colocated
from tests.web.conftest import AS_OPERATOR, AS_VIEWER, OPERATOR, VIEWER, MakeClient

HX = {"HX-Request": "true"}


def sweep(*completed: int) -> dict:
    runs = [
        {
            "request_rate": float(i + 1),
            "slo_attainment": 0.9 if n else 0.0,
            "p99_ttft_ms": 40.0,
            "p99_itl_ms": 8.0,
            "request_goodput": (i + 1) * 0.9 if n else 0.0,
            "completed": n,
            "failed": 10 - n,
            "ttfts": [0.1] * n,  # what --save-requests adds: kept as sent
        }
        for i, n in enumerate(completed)
    ]
    return {"goodput_share": 0.9, "max_goodput_rate": 2.0, "runs": runs}


def report(revision: int = 1, **over) -> dict:
    body = {
        "revision": revision,
        "config": {"rates": [1.0, 2.0], "num_prompts": 10, "input_len": 128, "output_len": 32},
        "result": sweep(10, 10),
    }
    body.update(over)
    return body


@pytest.fixture
def app(make_client: MakeClient) -> TestClient:
    client = make_client(controller=False, operator_tokens=[OPERATOR], viewer_tokens=[VIEWER])
    body = colocated("solo")
    assert client.post("/api/deployments", json=body, headers=AS_OPERATOR).status_code == 201
    return client


def loc_of(response) -> list[list]:
    return [e["loc"] for e in response.json()["detail"]]


def test_a_reported_run_is_kept_listed_and_in_the_bench_panel(app):
    answer = app.post("/api/deployments/solo/bench/runs", json=report(), headers=AS_OPERATOR)
    assert answer.status_code == 201, answer.text
    run = answer.json()
    assert (run["status"], run["revision"], run["actor"], run["done"]) == (
        "done",
        1,
        "operator:alice",
        20,
    )
    assert run["config"]["source"] == "pdctl bench" and run["max_goodput_rate"] == 2.0
    listed = app.get("/api/deployments/solo/bench", headers=AS_VIEWER).json()
    assert [r["id"] for r in listed] == [run["id"]]
    panel = app.get("/deployments/solo/bench/runs", headers={**HX, **AS_VIEWER}).text
    assert f'data-run-id="{run["id"]}" data-status="done"' in panel
    assert 'data-source="pdctl bench"' in panel and "1, 2 × 10" in panel
    events = app.get("/api/events", params={"deployment": "solo"}, headers=AS_VIEWER).json()
    kept = [e for e in events if e["kind"] == "bench.done"]
    assert kept and "pdctl bench from a terminal" in kept[0]["message"]
    # the page redraws that list on a bench event (pdctl-live.js triggers pd-bench)
    whole = app.get("/deployments/solo/bench", headers={**HX, **AS_VIEWER}).text
    assert 'hx-trigger="pd-bench from:body"' in whole


def test_a_run_at_rate_inf_is_kept_and_shown(app):
    body = report(config={"rates": ["inf"], "num_prompts": 5}, result=sweep(5)["runs"][0])
    body["result"]["request_rate"] = "inf"
    answer = app.post("/api/deployments/solo/bench/runs", json=body, headers=AS_OPERATOR)
    assert answer.status_code == 201, answer.text
    panel = app.get("/deployments/solo/bench/runs", headers={**HX, **AS_VIEWER}).text
    assert "inf × 5" in panel


def test_a_run_no_request_of_which_succeeded_is_kept_as_failed(app):
    body = report(result=sweep(0, 0))
    run = app.post("/api/deployments/solo/bench/runs", json=body, headers=AS_OPERATOR).json()
    assert run["status"] == "failed" and "no request succeeded" in run["error"]


def test_a_run_across_a_change_says_its_figures_mix_two_revisions(app):
    changed = {**colocated("solo"), "slo": {"ttft_ms": 500}}
    assert app.put("/api/deployments/solo", json=changed, headers=AS_OPERATOR).status_code == 200
    run = app.post("/api/deployments/solo/bench/runs", json=report(1), headers=AS_OPERATOR).json()
    assert run["revision"] == 1 and "revision 1 -> 2" in run["error"]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (report(revision=7), ["body", "revision"]),
        (report(revision=0), ["body", "revision"]),
        (report(result={"runs": []}), ["body", "result"]),
        (report(result={"runs": [{"completed": 3}]}), ["body", "result"]),  # 1 rate of 2
        (report(result=sweep(10)), ["body", "result"]),
        (report(result={"runs": [{"completed": 3}] * 2}), ["body", "result", "runs", 0]),
        (
            report(result={**sweep(10, 10), "runs": [sweep(10)["runs"][0], {"request_rate": -1}]}),
            ["body", "result", "runs", 1, "request_rate"],
        ),
        (
            report(
                result={**sweep(10, 10), "runs": [{"request_rate": 1, "slo_attainment": 2}] * 2}
            ),
            ["body", "result", "runs", 0, "slo_attainment"],
        ),
        (report(result={**sweep(10, 10), "max_goodput_rate": {}}), ["body", "result"]),
        (report(config={"rates": [], "num_prompts": 1}), ["body", "config", "rates"]),
        (report(config={"rates": [-1.0], "num_prompts": 1}), ["body", "config", "rates", 0]),
        (report(config={"rates": [1.0], "num_prompts": 0}), ["body", "config", "num_prompts"]),
        (report(config={"rates": [1.0], "num_prompts": 1, "x": 1}), ["body", "config", "x"]),
    ],
)
def test_a_bad_report_is_a_422_naming_its_field(app, body, loc):
    answer = app.post("/api/deployments/solo/bench/runs", json=body, headers=AS_OPERATOR)
    assert answer.status_code == 422, answer.text
    assert any(got[: len(loc)] == loc for got in loc_of(answer)), loc_of(answer)
    assert app.get("/api/deployments/solo/bench", headers=AS_VIEWER).json() == []


def test_a_non_finite_number_anywhere_in_the_result_is_refused(app):
    text = json.dumps(report()).replace('"goodput_share": 0.9', '"goodput_share": NaN')
    answer = app.post(
        "/api/deployments/solo/bench/runs",
        content=text,
        headers={**AS_OPERATOR, "Content-Type": "application/json"},
    )
    assert answer.status_code == 422 and ["body", "result", "goodput_share"] in loc_of(answer)


def test_a_viewer_may_not_keep_a_run_nor_anyone_for_an_unknown_deployment(app):
    url = "/api/deployments/solo/bench/runs"
    assert app.post(url, json=report(), headers=AS_VIEWER).status_code == 403
    assert app.post(url, json=report()).status_code == 401
    gone = app.post("/api/deployments/gone/bench/runs", json=report(), headers=AS_OPERATOR)
    assert gone.status_code == 404 and "gone" in gone.json()["detail"]
