"""The bench pages through TestClient: the deployment page loads the Bench panel, the form's
422s sit at their fields, refusals show as a message, and the compare page carries every
run's curve and its numbers."""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from fastapi.testclient import TestClient

from state.bench_store import BenchStore, snapshot
from tests.specs import colocated, moriio_1p1d, spec
from tests.web.conftest import AS_OPERATOR, AS_VIEWER, MakeClient
from tests.web.routes.advise.test_bench_api import FakeController

HX = {"HX-Request": "true"}


@pytest.fixture
def app(make_client: MakeClient) -> TestClient:
    client = make_client(controller=False)
    client.app.state.controller = FakeController("STOPPED")
    assert client.post("/api/deployments", json=colocated("solo")).status_code == 201
    return client


def stored_run(client: TestClient, body: dict, revision: int, points: list[tuple]) -> int:
    store = BenchStore(client.app.state.store.engine)
    run = store.create(
        body["name"],
        revision,
        snapshot(spec(body)),
        {"rates": [1, 2], "num_prompts": 10},
        20,
        "alice",
    )
    result = {
        "goodput_share": 0.9,
        "max_goodput_rate": points[0][0],
        "runs": [
            {
                "request_rate": r,
                "slo_attainment": a,
                "p99_ttft_ms": 100.0,
                "p99_itl_ms": 20.0,
                "request_goodput": r * a,
                "completed": 10,
                "failed": 0,
            }
            for r, a in points
        ],
    }
    return store.finish(run.id, "done", done=20, result=result).id


def errors_at(html: str) -> dict[str, str]:
    return {
        k: html_lib.unescape(v)
        for k, v in re.findall(r'data-error-for="([^"]*)"[^>]*>([^<]*)<', html)
    }


def test_the_deployment_page_loads_the_bench_panel(app: TestClient) -> None:
    page = app.get("/deployments/solo").text
    assert 'hx-get="/deployments/solo/bench" hx-trigger="load"' in page
    panel = app.get("/deployments/solo/bench", headers=HX)
    assert panel.status_code == 200 and "<html" not in panel.text
    assert 'id="bench-form"' in panel.text and 'value="1,2,4,8"' in panel.text
    assert 'placeholder="1000"' in panel.text  # the deployment's own TTFT SLO
    assert "No bench runs yet." in panel.text
    assert "<html" in app.get("/deployments/solo/bench").text  # a page of its own too


def test_bad_form_fields_get_their_message(app: TestClient) -> None:
    response = app.post(
        "/deployments/solo/bench",
        headers=HX,
        data={"rates": "1,x", "num_prompts": "0", "input_len": "8"},
    )
    assert response.status_code == 422
    errors = errors_at(response.text)
    assert set(errors) == {"rates", "num_prompts"}
    assert 'value="1,x"' in response.text  # what was typed stays


def test_a_refusal_is_the_notice_and_the_panel_stays(app: TestClient) -> None:
    response = app.post("/deployments/solo/bench", headers=HX, data={"rates": "2"})
    assert response.status_code == 409 and response.headers["hx-retarget"] == "#notice"
    assert "deployment &#39;solo&#39; is not running" in response.text
    assert 'id="bench-form"' not in response.text


def test_a_viewer_sees_the_panel_but_cannot_start(make_client: MakeClient) -> None:
    client = make_client(
        controller=False, operator_tokens=["alice:op-secret"], viewer_tokens=["bob:view-secret"]
    )
    client.app.state.controller = FakeController()
    client.post("/api/deployments", json=colocated("solo"), headers=AS_OPERATOR)
    panel = client.get("/deployments/solo/bench", headers={**HX, **AS_VIEWER}).text
    assert re.search(r'<button class="primary" disabled\s+data-action="bench-start"', panel)
    response = client.post(
        "/deployments/solo/bench", headers={**HX, **AS_VIEWER}, data={"rates": "2"}
    )
    assert "bob may only read" in html_lib.unescape(response.text)
    assert client.get("/api/deployments/solo/bench", headers=AS_VIEWER).json() == []


def test_past_runs_are_listed_with_a_box_to_tick(app: TestClient) -> None:
    run_id = stored_run(app, colocated("solo"), 1, [(2.0, 1.0), (4.0, 0.5)])
    panel = app.get("/deployments/solo/bench", headers=HX).text
    assert f'name="id" value="{run_id}"' in panel
    assert 'action="/bench/compare"' in panel and "colocated x1" in panel


def test_the_compare_page_overlays_runs(app: TestClient) -> None:
    a = stored_run(app, colocated("solo"), 1, [(2.0, 1.0), (4.0, 0.5)])
    b = stored_run(app, moriio_1p1d("mori", mode="write"), 3, [(2.0, 1.0), (8.0, 0.9)])
    page = app.get("/bench/compare", params=[("id", a), ("id", b)])
    assert page.status_code == 200
    curves = json.loads(
        html_lib.unescape(
            re.search(
                r'<script type="application/json" id="bench-curves">(.*?)</script>', page.text, re.S
            ).group(1)
        )
    )
    assert [c["label"] for c in curves] == ["solo r1 · colocated x1", "mori r3 · write 1P1D"]
    assert page.text.count('data-chart="bench"') == 3 and "/static/bench.js" in page.text
    assert app.get(f"/bench/compare?ids={b},{a}").status_code == 200


def test_a_run_stopped_part_way_is_listed_ticked_and_compared_as_partial(app: TestClient) -> None:
    store = BenchStore(app.app.state.store.engine)
    run = store.create(
        "solo",
        1,
        snapshot(spec(colocated("solo"))),
        {"rates": [1, 2, 4], "num_prompts": 10},
        30,
        "alice",
    )
    kept = {
        "goodput_share": 0.9,
        "max_goodput_rate": 1,
        "partial": {"rates_done": 1, "rates": 3},
        "runs": [
            {
                "request_rate": 1,
                "slo_attainment": 0.95,
                "p99_ttft_ms": 80.0,
                "p99_itl_ms": 9.0,
                "request_goodput": 0.9,
                "completed": 10,
                "failed": 0,
            }
        ],
    }
    store.finish(
        run.id, "stopped", done=14, result=kept, error="stopped by alice after 1 of 3 rates; kept 1"
    )
    panel = app.get("/deployments/solo/bench", headers=HX).text
    row = re.search(rf'<tr data-run-id="{run.id}".*?</tr>', panel, re.S).group(0)
    assert "disabled" not in row  # its measured rates can be compared
    assert "partial · 1 of 3 rates" in row and "after 1 of 3 rates; kept 1" in row
    page = app.get(f"/bench/compare?ids={run.id}").text
    assert page.count(f'<tr data-run-id="{run.id}" data-partial>') == 1
    assert "solo r1 · colocated x1 (partial: 1 of 3 rates)" in page
    assert "95.0%" in page and "stopped part-way" in page


def test_the_compare_page_says_what_is_wrong(app: TestClient) -> None:
    assert app.get("/bench/compare").status_code == 404
    assert app.get("/bench/compare?ids=999").status_code == 404
    assert "no bench run 999" in app.get("/bench/compare?ids=999").text
