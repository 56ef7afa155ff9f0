"""One renderer for every error (web/errors.py): the same error is JSON for the API, the
page's notice for an htmx request and a page for a browser, chosen by HX-Request and Accept,
with the error's status in each."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from tests.specs import moriio_1p1d
from tests.web.conftest import MakeClient
from web.errors import wants

HX = {"HX-Request": "true"}
JSON = {"Accept": "application/json"}
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.fixture(scope="module")
def plane(make_module_client: MakeClient):
    client = make_module_client()
    assert client.post("/api/deployments", json=moriio_1p1d("mori")).status_code == 201
    return client


def is_fragment(response, status: int, *said: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["hx-retarget"] == "#notice"
    assert response.headers["hx-reswap"] == "outerHTML"
    assert response.headers["vary"] == "HX-Request"
    assert (
        response.text.startswith('<div id="notice" role="alert"') and "<html" not in response.text
    )
    assert f'data-error-status="{status}"' in response.text
    for words in said:
        assert words in response.text


def is_page(response, status: int, title: str, *said: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "hx-retarget" not in response.headers
    assert "<!doctype html>" in response.text and f"<h1>{title}</h1>" in response.text
    for words in said:
        assert words in response.text


# -- 404 --------------------------------------------------------------------------------------


def test_a_fragment_of_an_unknown_deployment_is_an_html_error_fragment_not_json(plane):
    response = plane.get("/deployments/nope/topology", headers=HX)
    is_fragment(response, 404, "Not found", "no deployment named &#39;nope&#39;")


def test_an_unknown_deployment_is_json_for_the_api(plane):
    response = plane.get("/api/deployments/nope")
    assert response.status_code == 404
    assert response.json() == {"detail": "no deployment named 'nope'"}
    assert plane.get("/deployments/nope/topology", headers=JSON).json() == response.json()


def test_an_unknown_deployment_is_a_page_for_a_browser(plane):
    is_page(plane.get("/deployments/nope", headers=BROWSER), 404, "Not found", "&#39;nope&#39;")
    is_page(plane.get("/deployments/nope"), 404, "Not found")  # a page route, no preference
    is_page(plane.get("/api/deployments/nope", headers=BROWSER), 404, "Not found")


def test_an_unknown_path_is_json_unless_html_is_asked_for(plane):
    assert plane.get("/api/nowhere").json() == {"detail": "Not Found"}
    is_page(plane.get("/nowhere", headers=BROWSER), 404, "Not Found")
    is_fragment(plane.get("/nowhere", headers=HX), 404, "Not Found")


# -- 409 --------------------------------------------------------------------------------------


def test_a_conflict_is_the_notice_for_htmx(plane):
    response = plane.post("/deployments/mori/actions/stop", headers=HX)
    is_fragment(response, 409, "deployment &#39;mori&#39; has not been started")


def test_a_conflict_is_json_for_the_api(plane):
    again = plane.post("/api/deployments", json=moriio_1p1d("mori"))
    assert again.status_code == 409
    assert again.json() == {"detail": "deployment 'mori' already exists"}
    stop = plane.post("/deployments/mori/actions/stop", headers=JSON)
    assert stop.status_code == 409
    assert stop.json() == {"detail": "deployment 'mori' has not been started"}


def test_a_conflict_is_a_page_for_a_browser(plane):
    response = plane.post("/deployments/mori/actions/stop", headers=BROWSER)
    is_page(response, 409, "Not in this state", "has not been started")
    again = plane.post("/api/deployments", json=moriio_1p1d("mori"), headers=BROWSER)
    is_page(again, 409, "Conflict", "already exists")


# -- 422 --------------------------------------------------------------------------------------


def test_an_invalid_parameter_is_json_naming_the_field(plane):
    response = plane.get("/api/events", params={"limit": 0})
    assert response.status_code == 422
    (item,) = response.json()["detail"]
    assert item["loc"] == ["query", "limit"] and set(item) == {"loc", "msg", "type"}
    fragment_route = plane.get("/deployments/mori/events?limit=0", headers=JSON)
    assert fragment_route.json()["detail"][0]["loc"] == ["query", "limit"]


def test_an_invalid_spec_is_json_naming_the_field(plane):
    spec = moriio_1p1d("bad")
    spec["slo"] = {"ttft_ms": -1, "itl_ms": 50}
    response = plane.post("/api/deployments", json=spec)
    assert response.status_code == 422
    assert ["body", "slo", "ttft_ms"] in [i["loc"] for i in response.json()["detail"]]


def test_an_invalid_parameter_is_the_notice_naming_the_field_for_htmx(plane):
    response = plane.get("/deployments/mori/events?limit=0", headers=HX)
    is_fragment(response, 422, "Invalid request", "limit: ")


def test_an_invalid_parameter_is_a_page_naming_the_field_for_a_browser(plane):
    response = plane.get("/deployments/mori/events?limit=0", headers=BROWSER)
    is_page(response, 422, "Invalid request", "limit: ")


# -- the rest of the tree -----------------------------------------------------------------------


def test_no_controller_is_a_503_notice_the_page_shows(make_client: MakeClient):
    client = make_client(controller=False)
    client.post("/api/deployments", json=moriio_1p1d("mori"))
    response = client.get("/deployments/mori/logs/proxy", headers=HX)
    is_fragment(response, 503, "Controller unavailable", "without a controller")
    assert client.get("/api/deployments/mori/logs/proxy").json() == {
        "detail": "this control plane runs without a controller"
    }


def test_headers_an_error_carries_reach_every_rendering(plane):
    plane.app.state.plan_running = True
    try:
        for headers in (HX, BROWSER, JSON):
            response = plane.get("/plan", params={"run": "1"}, headers=headers)
            assert response.status_code == 429 and response.headers["retry-after"] == "5"
    finally:
        plane.app.state.plan_running = False


# -- choosing the format ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "path", "kind"),
    [
        ({"hx-request": "true"}, "/api/deployments", "fragment"),
        (
            {"hx-request": "true", "hx-history-restore-request": "true", "accept": "text/html"},
            "/deployments/x",
            "page",
        ),
        ({"accept": "application/json"}, "/deployments/x", "json"),
        ({"accept": "text/html,*/*;q=0.8"}, "/api/deployments", "page"),
        ({"accept": "application/json;q=0.5, text/html;q=0.9"}, "/api/x", "page"),
        ({"accept": "*/*"}, "/api/deployments", "json"),
        ({}, "/metrics", "json"),
    ],
)
def test_the_format_is_chosen_by_hx_request_then_accept(headers, path, kind):
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
    }
    assert wants(Request(scope)) == kind
