"""Pages and the API answer whatever a stored revision holds: Infinity or NaN written before
they were refused, or a spec today's rules no longer accept (issue 13, finding 8), in a real
SQLite file written behind the store's back. And numbers JSON cannot carry are refused on
the way in, each a 422 naming its field."""

from __future__ import annotations

import json
import sqlite3

import pytest
from fastapi.testclient import TestClient

from tests.specs import nixl_1p1d

HX = {"HX-Request": "true"}


def stored_as(client: TestClient, name: str, edit) -> None:
    """Deployment `name` created through the API, then its revision's JSON rewritten in the
    file: `edit(spec_dict)` changes it; the text is written as Python's json writes it
    (`Infinity`, `NaN`), as SQLAlchemy's JSON column did."""
    assert client.post("/api/deployments", json=nixl_1p1d(name)).status_code == 201
    with sqlite3.connect(client.app.state.settings.db) as db:
        (raw,) = db.execute(
            "SELECT spec FROM revisions JOIN deployments ON deployments.id = deployment_id "
            "WHERE name = ?",
            (name,),
        ).fetchone()
        spec = json.loads(raw)
        edit(spec)
        db.execute(
            "UPDATE revisions SET spec = ? WHERE deployment_id = "
            "(SELECT id FROM deployments WHERE name = ?)",
            (json.dumps(spec), name),
        )


def infinite_slo(spec: dict) -> None:
    spec["slo"]["ttft_ms"] = float("inf")


def nan_slo(spec: dict) -> None:
    spec["slo"]["itl_ms"] = float("nan")


def unknown_field(spec: dict) -> None:
    spec["groups"][0]["replicas"] = 3  # a field no model has


def wrong_type(spec: dict) -> None:
    spec["groups"] = "prefill,decode"


BROKEN = [infinite_slo, nan_slo, unknown_field, wrong_type]


@pytest.mark.parametrize("edit", BROKEN, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/deployments/bad",
        "/deployments/bad/edit",
        "/api/deployments",
        "/api/deployments/bad",
        "/api/deployments/bad/revisions/1",
        "/api/events",
    ],
)
def test_stored_data_never_makes_a_500(client: TestClient, edit, path: str) -> None:
    stored_as(client, "bad", edit)
    response = client.get(path)
    assert response.status_code < 500, response.text
    if path.startswith("/api"):
        response.json()  # JSON a client can parse: no bare Infinity
    if response.status_code >= 400:
        assert "revision 1" in response.text and "bad" in response.text


@pytest.mark.parametrize("edit", BROKEN, ids=lambda f: f.__name__)
def test_the_list_shows_a_broken_deployment_beside_the_good_ones(client, edit) -> None:
    assert client.post("/api/deployments", json=nixl_1p1d("good")).status_code == 201
    stored_as(client, "bad", edit)
    page = client.get("/")
    assert page.status_code == 200 and "good" in page.text
    assert "bad" in page.text and "cannot be read" in page.text
    listed = client.get("/api/deployments").json()
    assert [d["name"] for d in listed] == ["good"]
    detail = client.get("/api/deployments/bad")
    assert detail.status_code == 409 and "PUT" in detail.json()["detail"]


@pytest.mark.parametrize("edit", BROKEN, ids=lambda f: f.__name__)
def test_a_broken_deployment_can_be_replaced_or_deleted_and_others_still_created(
    client, edit
) -> None:
    stored_as(client, "bad", edit)
    assert client.post("/api/deployments", json=nixl_1p1d("other")).status_code == 201
    fixed = client.put("/api/deployments/bad", json=nixl_1p1d("bad"))
    assert fixed.status_code == 200, fixed.text
    assert fixed.json()["revision"] == 2
    assert client.get("/deployments/bad").status_code == 200
    assert client.delete("/api/deployments/bad").status_code == 204


@pytest.mark.parametrize(
    ("path", "body", "loc"),
    [
        ("/api/deployments", nixl_1p1d(slo={"ttft_ms": float("inf")}), ["slo", "ttft_ms"]),
        ("/api/deployments", nixl_1p1d(time_scale=float("nan")), ["time_scale"]),
        (
            "/api/deployments",
            nixl_1p1d(kv_connector_extra_config={"x": float("-inf")}),
            ["kv_connector_extra_config", "x"],
        ),
        ("/api/plan", {"rates": [8.0], "link_gbps": float("nan")}, ["link_gbps"]),
        ("/api/plan", {"workload": {"burstiness": float("inf")}}, ["workload", "burstiness"]),
        ("/api/advice", {"signals": {"ttft_p99_ms": float("inf")}}, ["signals", "ttft_p99_ms"]),
        ("/api/advice", {"bench": {"runs": [{"rate": float("nan")}]}}, ["bench", "runs", 0]),
        ("/api/deployments/pd/bench", {"rates": [1], "burstiness": float("inf")}, ["burstiness"]),
    ],
)
def test_non_finite_numbers_are_refused_naming_the_field(client, path, body, loc) -> None:
    text = json.dumps(body)  # Python writes Infinity and NaN, as a careless client would
    response = client.post(path, content=text, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    locs = [item["loc"] for item in response.json()["detail"]]
    assert any(item[1 : 1 + len(loc)] == loc for item in locs), locs


def test_a_huge_number_that_reads_as_infinity_is_refused(client) -> None:
    text = json.dumps(nixl_1p1d()).replace('"model"', '"time_scale": 1e999, "model"')
    response = client.post(
        "/api/deployments", content=text, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert ["body", "time_scale"] in [i["loc"] for i in response.json()["detail"]]


def test_the_form_refuses_an_infinite_slo_at_its_field(client) -> None:
    from tests.web.form_fields import form_fields

    fields = form_fields(client.get("/deployments/new").text)
    fields.update({"name": "inf", "slo.ttft_ms": "Infinity", "action": "save"})
    response = client.post("/deployments/new", data=fields, headers=HX)
    assert response.status_code == 422
    assert 'data-error-for="slo.ttft_ms"' in response.text
    assert client.get("/api/deployments").json() == []


@pytest.mark.parametrize("edit", [infinite_slo, nan_slo], ids=lambda f: f.__name__)
def test_the_edit_form_says_what_is_wrong_and_saves_a_fix(client, edit) -> None:
    from tests.web.form_fields import form_fields

    stored_as(client, "bad", edit)
    page = client.get("/deployments/bad/edit")
    assert page.status_code == 200 and "cannot be read" in page.text
    fields = form_fields(page.text)
    fields.update({"slo.ttft_ms": "900", "slo.itl_ms": "40", "action": "save"})
    response = client.post("/deployments/bad/edit", data=fields, headers=HX)
    assert response.headers.get("hx-redirect") == "/deployments/bad", response.text
    assert client.get("/api/deployments/bad").json()["spec"]["slo"]["ttft_ms"] == 900


def test_stored_infinity_is_shown_by_name_in_revisions_and_events(client) -> None:
    stored_as(client, "bad", infinite_slo)
    revision = client.get("/api/deployments/bad/revisions/1").json()
    assert revision["spec"]["slo"]["ttft_ms"] == "Infinity"
    assert client.delete("/api/deployments/bad").status_code == 204
    (event,) = client.get("/api/events?kind=deployment.deleted").json()
    assert event["detail"]["spec"]["slo"]["ttft_ms"] == "Infinity"


@pytest.mark.parametrize("rate", ["nan", "inf", "-Infinity"])
def test_the_load_form_refuses_a_non_finite_rate(client, rate: str) -> None:
    assert client.post("/api/deployments", json=nixl_1p1d("pd")).status_code == 201
    response = client.post("/deployments/pd/load", data={"rate": rate}, headers=HX)
    assert response.status_code == 422, response.text
    assert "rate: input should be a finite number" in response.text
