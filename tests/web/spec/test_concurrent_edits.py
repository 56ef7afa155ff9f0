"""Two edits made from the same revision cannot both be stored: the API's If-Match (or the
body's `revision`) and the edit form's hidden revision make the second a 409 naming the
revision it was made from and the current one (issue 13, finding 11)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.specs import nixl_1p1d
from tests.web.form_fields import form_fields

HX = {"HX-Request": "true"}


def created(client: TestClient) -> None:
    assert client.post("/api/deployments", json=nixl_1p1d()).status_code == 201


def test_a_get_gives_the_revision_as_etag(client: TestClient) -> None:
    created(client)
    assert client.get("/api/deployments/pd").headers["etag"] == '"1"'


def test_the_second_put_from_the_same_revision_is_409_and_loses_nothing(client) -> None:
    created(client)
    tag = client.get("/api/deployments/pd").headers["etag"]
    first = client.put(
        "/api/deployments/pd", json=nixl_1p1d(time_scale=2.0), headers={"If-Match": tag}
    )
    assert first.status_code == 200 and first.headers["etag"] == '"2"'
    second = client.put(
        "/api/deployments/pd", json=nixl_1p1d(time_scale=3.0), headers={"If-Match": tag}
    )
    assert second.status_code == 409
    detail = second.json()["detail"]
    assert "revision 2" in detail and "from revision 1" in detail
    assert second.headers["etag"] == '"2"'
    stored = client.get("/api/deployments/pd").json()
    assert stored["revision"] == 2 and stored["spec"]["time_scale"] == 2.0


def test_the_revision_in_the_body_does_the_same(client) -> None:
    created(client)
    ok = client.put("/api/deployments/pd", json={**nixl_1p1d(time_scale=2.0), "revision": 1})
    assert ok.status_code == 200
    stale = client.put("/api/deployments/pd", json={**nixl_1p1d(time_scale=3.0), "revision": 1})
    assert stale.status_code == 409 and "from revision 1" in stale.json()["detail"]
    assert client.get("/api/deployments/pd").json()["spec"]["time_scale"] == 2.0


def test_without_a_precondition_or_with_star_a_put_is_stored(client) -> None:
    created(client)
    assert client.put("/api/deployments/pd", json=nixl_1p1d(time_scale=2.0)).status_code == 200
    star = client.put(
        "/api/deployments/pd", json=nixl_1p1d(time_scale=4.0), headers={"If-Match": "*"}
    )
    assert star.status_code == 200 and star.json()["revision"] == 3
    weak = client.put(
        "/api/deployments/pd", json=nixl_1p1d(time_scale=5.0), headers={"If-Match": 'W/"3"'}
    )
    assert weak.status_code == 200


def test_a_malformed_if_match_is_400_naming_it(client) -> None:
    created(client)
    response = client.put("/api/deployments/pd", json=nixl_1p1d(), headers={"If-Match": "abc"})
    assert response.status_code == 400 and "If-Match" in response.json()["detail"]


def test_two_forms_opened_at_one_revision_cannot_both_be_saved(client) -> None:
    created(client)
    one = form_fields(client.get("/deployments/pd/edit").text)
    two = form_fields(client.get("/deployments/pd/edit").text)
    assert one["revision"] == "1"
    saved = client.post(
        "/deployments/pd/edit", data={**one, "slo.ttft_ms": "500", "action": "save"}, headers=HX
    )
    assert saved.headers.get("hx-redirect") == "/deployments/pd", saved.text
    stale = client.post(
        "/deployments/pd/edit", data={**two, "slo.ttft_ms": "900", "action": "save"}, headers=HX
    )
    assert stale.status_code == 409
    assert "from revision 1" in stale.text and "revision 2" in stale.text
    assert client.get("/api/deployments/pd").json()["spec"]["slo"]["ttft_ms"] == 500
