"""The switch forecast through the API and in the switch dialog (TestClient, nothing started:
the starts are modelled)."""

from tests.web.pages.test_pages import HX, moriio


def slow(name: str = "mori") -> dict:
    """The MORI-IO model on MI300X, the stand-in's starts at the modelled time."""
    spec = moriio(name)
    spec.update(model="qwen3-235b-a22b-fp8", hardware="mi300x", start_time_scale=1.0)
    for group in spec["groups"]:
        group["tp"] = 4
    return spec


def test_the_api_forecasts_each_strategy_from_modelled_starts(client):
    client.post("/api/deployments", json=moriio())
    got = client.get("/api/deployments/mori/switch/forecast?mode=write")
    assert got.status_code == 200
    body = got.json()
    assert body["target"] == "write" and body["hold_deadline_s"] == 30.0
    assert body["starts"]["prefill"]["source"] == "modelled"
    by = {f["strategy"]: f for f in body["strategies"]}
    assert not by["roll"]["possible"] and "two or more of each" in by["roll"]["refused"]
    assert by["hold"]["possible"] and by["hold"]["warnings"] == []
    assert by["keep-serving"]["degraded_s"] > 0


def test_a_hold_on_real_start_times_warns_that_late_requests_get_503(client):
    assert client.post("/api/deployments", json=slow()).status_code == 201
    body = client.get("/api/deployments/mori/switch/forecast?mode=write&rate=8").json()
    hold = next(f for f in body["strategies"] if f["strategy"] == "hold")
    assert hold["held_s"] > 100 and hold["rejected_window_s"] > 70
    assert "get 503" in hold["warnings"][0] and "8 req/s" in hold["warnings"][0]
    assert body["starts"]["decode"]["seconds"] > 100
    assert "qwen3-235b-a22b-fp8 on 4 x mi300x" in body["starts"]["decode"]["detail"]


def test_bad_forecast_queries_are_422_naming_the_field(client):
    client.post("/api/deployments", json=moriio())
    for query, field in (("mode=sideways", "mode"), ("mode=write&rate=0", "rate"), ("", "mode")):
        got = client.get(f"/api/deployments/mori/switch/forecast?{query}")
        assert got.status_code == 422, query
        assert field in [d["loc"][-1] for d in got.json()["detail"]], got.json()


def test_start_time_scale_is_checked_and_rendered_for_the_stand_in(client):
    bad = client.post("/api/deployments", json={**moriio(), "start_time_scale": -1})
    assert bad.status_code == 422 and "start_time_scale" in bad.text
    client.post("/api/deployments", json={**moriio(), "start_time_scale": 0.25})
    commands = client.get("/api/deployments/mori/commands").json()
    assert "--start-time-scale 0.25" in " ".join(commands["prefill-0"]["argv"])


def test_the_switch_dialog_shows_the_forecast_and_its_warning(client):
    client.post("/api/deployments", json=slow())
    page = client.get("/deployments/mori").text
    assert 'id="switch-forecast"' in page and 'data-forecast-target="write"' in page
    assert 'data-strategy="hold" class="warn"' in page and "data-forecast-warning" in page
    assert "longer than the proxy&#39;s hold deadline" in page
    fragment = client.get("/deployments/mori/switch-forecast?mode=read", headers=HX).text
    assert "<html" not in fragment and 'data-forecast-target="read"' in fragment
