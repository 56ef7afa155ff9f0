"""The HTML pages and their fragments, through FastAPI's TestClient: what an htmx request gets
back, the API's 422s placed at the form's fields, and errors shown as messages."""

from __future__ import annotations

import html as html_lib
import re

from services.demo.deployments import DEMO_NAME, demo_spec, ensure_demo
from tests.web.conftest import AS_OPERATOR, AS_VIEWER
from web.htmx import HTMX_VERSION, HTMX_WS_VERSION, UPLOT_VERSION

HX = {"HX-Request": "true"}


def moriio(name: str = "mori") -> dict:
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "prefix_caching": False,
        "groups": [
            {"name": "prefill", "role": "prefill", "mode": "read"},
            {"name": "decode", "role": "decode", "mode": "read"},
        ],
    }


def form(**changes: str) -> dict[str, str]:
    data = {
        "name": "mori",
        "engine": "sim",
        "model": "tiny",
        "hardware": "",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "proxy.policy": "round-robin",
        "slo.ttft_ms": "1000",
        "slo.itl_ms": "50",
        "slo.itl_stat": "p99",
        "extra_args": "",
        "action": "save",
        "groups.0.name": "prefill",
        "groups.0.role": "prefill",
        "groups.0.count": "1",
        "groups.0.tp": "1",
        "groups.0.gpus": "",
        "groups.0.mode": "read",
        "groups.0._rest": "{}",
        "groups.1.name": "decode",
        "groups.1.role": "decode",
        "groups.1.count": "1",
        "groups.1.tp": "1",
        "groups.1.gpus": "",
        "groups.1.mode": "read",
        "groups.1._rest": "{}",
    }
    data.update(changes)
    return data


def field_errors(html: str) -> dict[str, str]:
    return {
        k: html_lib.unescape(v)
        for k, v in re.findall(r'data-error-for="([^"]*)"[^>]*>([^<]*)<', html)
    }


def test_a_browser_without_a_token_is_sent_to_login(secured):
    response = secured.get("/", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/login"
    response = secured.get("/deployments/new", headers=HX)
    assert response.status_code == 401 and response.headers["hx-redirect"] == "/login"
    assert secured.get("/login").status_code == 200


def test_signed_in_browser_sees_the_list(secured):
    secured.post("/login", data={"token": "op-secret"}, follow_redirects=False)
    page = secured.get("/")
    assert page.status_code == 200 and "alice" in page.text


def test_list_shows_each_deployment_with_a_live_state_badge(client):
    assert client.post("/api/deployments", json=moriio()).status_code == 201
    page = client.get("/")
    assert "<html" in page.text and 'hx-trigger="every 2s"' in page.text
    rows = client.get("/", headers=HX)
    assert "<html" not in rows.text and rows.headers["vary"] == "HX-Request"
    assert 'data-deployment="mori"' in rows.text and 'data-state="stopped"' in rows.text
    assert "simulated" in rows.text and "mode-read" in rows.text


def test_form_shows_a_rule_broken_at_its_field(client):
    response = client.post("/deployments/new", data=form(**{"groups.0.gpus": "0,1"}), headers=HX)
    assert response.status_code == 422
    assert field_errors(response.text) == {
        "groups.0.gpus": "1 instance(s) x TP 1 need 1 GPU ids, got 2"
    }
    assert 'id="f-groups.0.gpus" name="groups.0.gpus" value="0,1"' in response.text
    assert 'aria-invalid="true" aria-describedby="err-groups-0-gpus"' in response.text
    assert client.get("/api/deployments").json() == []


def test_form_shows_type_errors_at_the_field_and_keeps_what_was_typed(client):
    response = client.post(
        "/deployments/new", data=form(**{"slo.itl_ms": "fast", "groups.1.count": "two"}), headers=HX
    )
    errors = field_errors(response.text)
    assert response.status_code == 422
    assert "valid number" in errors["slo.itl_ms"]
    assert "valid integer" in errors["groups.1.count"]
    assert 'value="fast"' in response.text


def test_form_places_store_rules_and_name_conflicts(client):
    data = form(prefix_caching="on")
    errors = field_errors(client.post("/deployments/new", data=data, headers=HX).text)
    assert "prefix caching" in errors["prefix_caching"]
    client.post("/api/deployments", json=moriio())
    errors = field_errors(client.post("/deployments/new", data=form(), headers=HX).text)
    assert errors == {"name": "deployment 'mori' already exists"}


def test_form_creates_and_sends_the_browser_to_the_deployment(client):
    response = client.post("/deployments/new", data=form(), headers=HX)
    assert response.status_code == 200 and response.headers["hx-redirect"] == "/deployments/mori"
    response = client.post("/deployments/new", data=form(name="plain"), follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/deployments/plain"
    assert client.get("/api/deployments/mori").json()["spec"]["groups"][0]["mode"] == "read"


def test_adding_and_removing_groups_saves_nothing(client):
    added = client.post("/deployments/new", data=form(action="add-group"), headers=HX)
    assert added.status_code == 200 and 'name="groups.2.name"' in added.text
    removed = client.post("/deployments/new", data=form(action="remove-group-0"), headers=HX)
    assert 'name="groups.1.name"' not in removed.text and 'value="decode"' in removed.text
    assert client.get("/api/deployments").json() == []


def test_edit_keeps_what_the_form_does_not_show(client):
    spec = moriio()
    spec["groups"][0]["env"] = {"VLLM_LOGGING_PREFIX": "1"}
    spec["groups"][0]["max_num_seqs"] = 64
    client.post("/api/deployments", json=spec)
    page = client.get("/deployments/mori/edit")
    assert page.status_code == 200 and "readonly" in page.text
    rest = re.search(r'name="groups.0._rest" value="([^"]*)"', page.text)[1]
    data = form(
        **{"groups.0._rest": html_lib.unescape(rest), "slo.ttft_ms": "250", "reason": "tighter"}
    )
    response = client.post("/deployments/mori/edit", data=data, headers=HX)
    assert response.headers["hx-redirect"] == "/deployments/mori"
    stored = client.get("/api/deployments/mori").json()
    assert stored["revision"] == 2 and stored["reason"] == "tighter"
    assert stored["spec"]["slo"]["ttft_ms"] == 250
    assert stored["spec"]["groups"][0]["env"] == {"VLLM_LOGGING_PREFIX": "1"}
    assert stored["spec"]["groups"][0]["max_num_seqs"] == 64


def test_a_viewer_is_told_it_may_only_read(secured):
    response = secured.post("/deployments/new", data=form(), headers={**HX, **AS_VIEWER})
    assert response.status_code == 403 and "may only read" in response.text
    assert response.headers["hx-retarget"] == "#notice"
    assert secured.get("/api/deployments", headers=AS_VIEWER).json() == []


def test_deployment_page_wires_the_live_socket_and_the_charts(client):
    client.post("/api/deployments", json=moriio())
    page = client.get("/deployments/mori")
    assert page.status_code == 200
    assert 'hx-ext="ws" ws-connect="/ws/deployments/mori"' in page.text
    for chart in (
        "chart-ttft",
        "chart-itl",
        "chart-slo",
        "chart-rate",
        "chart-kv",
        "chart-load",
        "chart-kvcache",
    ):
        assert f'id="{chart}"' in page.text
    assert 'class="tag sim"' in page.text and ">derived<" in page.text
    assert 'data-slo-ttft-ms="1000.0"' in page.text
    assert 'id="switch-dialog"' in page.text and 'value="keep-serving"' in page.text
    scripts = re.findall(r'<script src="([^"]+)"', page.text)
    assert scripts and all(s.startswith("/static/") for s in scripts)
    assert f"/static/htmx-ext-ws-{HTMX_WS_VERSION}.min.js" in scripts


def test_vendored_browser_files_are_served_with_versions(client):
    for path in (
        f"htmx-{HTMX_VERSION}.min.js",
        f"htmx-ext-ws-{HTMX_WS_VERSION}.min.js",
        f"uPlot-{UPLOT_VERSION}.iife.min.js",
        f"uPlot-{UPLOT_VERSION}.min.css",
        "pdctl.css",
        "pdctl.js",
        "pdctl-live.js",
    ):
        assert client.get(f"/static/{path}").status_code == 200, path
    assert f'version:"{HTMX_VERSION}"' in client.get(f"/static/htmx-{HTMX_VERSION}.min.js").text


def test_topology_fragment_shows_groups_instances_ports_and_state(client):
    created = client.post("/api/deployments", json=moriio()).json()
    html = client.get("/deployments/mori/topology", headers=HX).text
    assert "<html" not in html
    assert 'data-instance="prefill-0" data-state="STOPPED"' in html
    assert f":{created['ports']['proxy']}" in html
    http = created["ports"]["instances"]["decode-0"]["http"]
    assert f"http :{http}" in html and 'data-mode="read"' in html
    assert 'hx-swap-oob="innerHTML:#state-badge"' in html


def test_an_action_that_fails_comes_back_as_the_notice_with_its_status(client):
    client.post("/api/deployments", json=moriio())
    response = client.post("/deployments/mori/actions/stop", headers=HX)
    assert response.status_code == 409 and response.headers["hx-retarget"] == "#notice"
    assert response.text.startswith('<div id="notice" role="alert"')
    assert "has not been started" in response.text
    response = client.post("/deployments/mori/actions/explode", headers=HX)
    assert response.status_code == 404 and "no action &#39;explode&#39;" in response.text


def test_switch_needs_a_reason_and_says_why_it_is_refused(client):
    client.post("/api/deployments", json=moriio())
    response = client.post(
        "/deployments/mori/switch",
        headers=HX,
        data={"mode": "write", "strategy": "hold", "reason": ""},
    )
    assert response.status_code == 422
    assert "reason" in field_errors(response.text)
    response = client.post(
        "/deployments/mori/switch",
        headers=HX,
        data={"mode": "write", "strategy": "hold", "reason": "test"},
    )
    assert response.status_code == 409 and "not running" in response.text


def test_events_fragment_is_the_deployment_log_newest_first(client):
    client.post("/api/deployments", json=moriio())
    client.put("/api/deployments/mori?reason=again", json={**moriio(), "model": "tiny"})
    client.post("/deployments/mori/actions/stop", headers=HX)
    html = client.get("/deployments/mori/events", headers=HX).text
    assert html.index("deployment.created") > 0


def test_commands_fragment_shows_the_vllm_serve_line(client):
    client.post("/api/deployments", json=moriio())
    html = client.get("/deployments/mori/commands", headers=HX).text
    assert re.search(r'data-command-for="prefill-0">[^<]*vllm serve tiny --port', html)
    assert "--kv-transfer-config" in html and "runs here as the stand-in" in html


def test_unknown_log_and_deployment_are_messages_not_blank(client):
    client.post("/api/deployments", json=moriio())
    html = client.get("/deployments/mori/logs/decode-0", headers=HX).text
    assert "has not been started" in html
    page = client.get("/deployments/nope")
    assert page.status_code == 404 and "<html" in page.text
    assert "no deployment" in page.text.lower() and 'role="alert"' in page.text
    assert client.get("/deployments/nope/topology", headers=HX).status_code == 404


def test_viewer_sees_controls_disabled(secured):
    secured.post("/api/deployments", json=moriio(), headers=AS_OPERATOR)
    page = secured.get("/deployments/mori", headers=AS_VIEWER)
    assert re.search(
        r'<button class="primary" disabled hx-post="/deployments/mori/actions/'
        r'start"',
        page.text,
    )
    response = secured.post("/deployments/mori/actions/start", headers={**HX, **AS_VIEWER})
    assert "may only read" in response.text


def test_demo_is_stored_only_into_an_empty_store(make_client):
    client = make_client(demo=True)
    demo = client.get("/api/deployments/demo").json()
    assert demo["spec"]["connector"] == "MoRIIOConnector" and demo["spec"]["model"] == "tiny"
    store = client.app.state.store
    assert ensure_demo(store) is False
    assert make_client().get("/api/deployments").json() == []
    assert demo_spec().name == DEMO_NAME


def _epd_form(**changes: str) -> dict[str, str]:
    data = form(
        name="epd",
        model="qwen2.5-vl-7b-instruct",
        hardware="h100",
        connector="NixlConnector",
        **{
            "ec_transfer.ec_connector": "ECExampleConnector",
            "ec_transfer.ec_connector_extra_config.shared_storage_path": "/tmp/pdctl-ec-form",
            "groups.2.name": "encode",
            "groups.2.role": "encode",
            "groups.2.count": "1",
            "groups.2.tp": "1",
            "groups.2.gpus": "",
            "groups.2.mode": "",
            "groups.2._rest": "{}",
            "groups.0.mode": "",
            "groups.1.mode": "",
        },
    )
    data.update(changes)
    return data


def test_form_creates_an_encode_prefill_decode_deployment(make_client):
    client = make_client(engine_path_roots=["/tmp/pdctl-ec-form"])  # the store may be there
    response = client.post("/deployments/new", data=_epd_form(), headers=HX)
    assert response.status_code == 200, field_errors(response.text)
    spec = client.get("/api/deployments/epd").json()["spec"]
    assert spec["ec_transfer"] == {
        "ec_connector": "ECExampleConnector",
        "ec_connector_extra_config": {"shared_storage_path": "/tmp/pdctl-ec-form"},
    }
    assert [g["role"] for g in spec["groups"]] == ["prefill", "decode", "encode"]
    page = client.get("/deployments/epd/edit").text  # the edit form shows them back
    assert '<option value="ECExampleConnector" selected>' in page
    assert 'value="/tmp/pdctl-ec-form"' in page


def test_form_places_the_encoder_rules_at_their_fields(client):
    no_ec = _epd_form(**{"ec_transfer.ec_connector": ""})
    errors = field_errors(client.post("/deployments/new", data=no_ec, headers=HX).text)
    assert "needs ec_transfer" in errors["groups.2.role"]
    storage = "ec_transfer.ec_connector_extra_config.shared_storage_path"
    no_path = _epd_form(**{storage: ""})
    errors = field_errors(client.post("/deployments/new", data=no_path, headers=HX).text)
    assert "shared_storage_path" in errors[storage]
    no_encoder = form(**{"ec_transfer.ec_connector": "ECExampleConnector"})
    errors = field_errors(client.post("/deployments/new", data=no_encoder, headers=HX).text)
    assert "no producer" in errors["ec_transfer"]
    assert client.get("/api/deployments").json() == []
