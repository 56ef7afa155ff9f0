"""The advisor's proposals over HTTP: each triggered verdict with a change carries the spec
fields it changes and the planner's forecast on the measured workload; applying one stores
the revision and audits it; stale revisions, verdicts that no longer hold, rules with no change
and viewers are refused with the field named."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.specs import moriio_1p1d, nixl_1p1d
from tests.web.conftest import AS_OPERATOR, AS_VIEWER, OPERATOR, VIEWER, MakeClient
from tests.web.routes.advise.test_advice_api import FakeObserver, live_frame


def ttft_bound(name: str) -> dict:
    """live_frame's TTFT over target, with the answer length the forecast replays."""
    return {
        **live_frame(name),
        "engines": {"prompt_tokens_per_request": 2000.0, "output_tokens_per_request": 64.0},
    }


def observe(client: TestClient, frames: dict[str, dict]) -> None:
    """Frames from a fake; the real scraper (there with a controller) is still closed by the
    lifespan, which closes whatever observer it finds."""
    real, fake = client.app.state.observer, FakeObserver(frames)
    if real is not None:
        fake.close = real.close
    client.app.state.observer = fake


@pytest.fixture
def plane(make_client: MakeClient) -> TestClient:
    client = make_client()
    assert client.post("/api/deployments", json=nixl_1p1d()).status_code == 201
    observe(client, {"pd": ttft_bound("pd")})
    return client


def proposal(result: dict, rule: str) -> dict:
    return next(p for p in result["proposals"] if p["rule"] == rule)


def test_no_live_frame_no_proposal(make_client):
    client = make_client()
    client.post("/api/deployments", json=nixl_1p1d())
    result = client.get("/api/deployments/pd/proposals").json()
    assert result == {
        "deployment": "pd",
        "revision": 1,
        "window": "1m",
        "live": False,
        "not_enough_evidence": None,
        "proposals": [],
    }


def test_a_ttft_bound_pair_is_proposed_a_wider_prefill_with_the_planners_forecast(plane):
    result = plane.get("/api/deployments/pd/proposals", params={"window": "10s"}).json()
    assert result["live"] is True and result["revision"] == 1
    p = proposal(result, "ttft_binding")
    assert p["how"] == "revision" and "tensor parallelism" in p["summary"]
    assert p["changes"] == [{"path": ["groups", 0, "tp"], "op": "changed", "old": 1, "new": 2}]
    assert p["watch"] == {"signal": "ttft_p99_ms", "direction": "down"}
    forecast = p["forecast"]
    assert forecast["source"] == "planner"
    assert forecast["workload"]["input_len"] == 2000 and forecast["workload"]["output_len"] == 64
    assert forecast["now"]["config"] == "1P-TP1+1D-TP1 read"
    assert forecast["after"]["config"] == "1P-TP2+1D-TP1 read"
    predicted = forecast["predicted"]
    assert predicted["signal"] == "ttft_p99_ms" and predicted["now_measured"] == 1500.0
    assert predicted["direction"] in ("down", "flat", "up")
    assert predicted["agrees"] == (predicted["direction"] == "down")
    # the baseline is the figure the page shows (the advisor's measured p99), not the planner's
    assert predicted["baseline"] == 1500.0 and isinstance(predicted["expected"], float)
    assert p["changes_text"] == ["group prefill: tp: 1 → 2"]


def test_applying_stores_the_revision_and_audits_it(plane):
    answer = plane.post(
        "/api/deployments/pd/proposals/apply",
        json={"rule": "ttft_binding", "revision": 1, "reason": "on-call: TTFT over"},
    )
    assert answer.status_code == 200, answer.text
    applied = answer.json()
    assert applied["revision"] == 2 and applied["restarted"] is False
    stored = plane.get("/api/deployments/pd").json()
    assert stored["revision"] == 2 and stored["spec"]["groups"][0]["tp"] == 2
    assert stored["reason"] == "on-call: TTFT over"
    event = plane.get("/api/events", params={"deployment": "pd", "kind": "advisor.apply"}).json()
    assert len(event) == 1 and "ttft_binding" in event[0]["message"]
    detail = event[0]["detail"]
    assert detail["from_revision"] == 1 and detail["revision"] == 2
    assert detail["evidence"]["ttft_p99_ms"] == 1500.0
    assert detail["forecast"]["source"] == "planner"


def test_a_proposal_shown_on_an_older_revision_is_a_409(plane):
    plane.post("/api/deployments/pd/proposals/apply", json={"rule": "ttft_binding", "revision": 1})
    again = plane.post(
        "/api/deployments/pd/proposals/apply", json={"rule": "ttft_binding", "revision": 1}
    )
    assert again.status_code == 409 and "at revision 2" in again.json()["detail"]


def test_a_verdict_that_no_longer_holds_is_not_applied(plane):
    answer = plane.post(
        "/api/deployments/pd/proposals/apply", json={"rule": "light_traffic", "revision": 1}
    )
    assert answer.status_code == 409 and "does not hold" in answer.json()["detail"]
    assert plane.get("/api/deployments/pd").json()["revision"] == 1


def test_a_rule_without_a_change_is_a_422_naming_rule(plane):
    answer = plane.post(
        "/api/deployments/pd/proposals/apply", json={"rule": "canary_failing", "revision": 1}
    )
    assert answer.status_code == 422
    detail = answer.json()["detail"][0]
    assert detail["loc"][-1] == "rule" and "itl_binding" in detail["msg"]


def test_a_verdict_with_no_change_for_this_deployment_is_a_422(make_client):
    client = make_client()
    client.post("/api/deployments", json=moriio_1p1d())
    observe(client, {"mori": ttft_bound("mori")})
    # MoRIIO TP2 1P1D: no decode to spare, and its prefill can widen; ask a rule it cannot do
    answer = client.post(
        "/api/deployments/mori/proposals/apply", json={"rule": "itl_binding", "revision": 1}
    )
    assert answer.status_code == 409  # ITL is fine: the verdict does not hold
    frame = ttft_bound("mori")
    frame["ttft"] = {**frame["ttft"], "p99": 0.2}
    frame["itl"] = {**frame["itl"], "p99": 0.09}
    observe(client, {"mori": frame})
    answer = client.post(
        "/api/deployments/mori/proposals/apply", json={"rule": "itl_binding", "revision": 1}
    )
    assert answer.status_code == 422, answer.text
    assert "recommends no change" in answer.json()["detail"][0]["msg"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"rule": "ttft_binding"}, "revision"),
        ({"rule": "ttft_binding", "revision": 0}, "revision"),
        ({"rule": "", "revision": 1}, "rule"),
        ({"rule": "ttft_binding", "revision": 1, "window": "2h"}, "window"),
        ({"rule": "ttft_binding", "revision": 1, "force": True}, "force"),
    ],
)
def test_bad_bodies_are_422s_naming_the_field(plane, body, field):
    answer = plane.post("/api/deployments/pd/proposals/apply", json=body)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"][-1] == field


def test_unknown_deployment_is_404(plane):
    assert plane.get("/api/deployments/nope/proposals").status_code == 404
    answer = plane.post(
        "/api/deployments/nope/proposals/apply", json={"rule": "ttft_binding", "revision": 1}
    )
    assert answer.status_code == 404


def test_viewers_see_proposals_and_only_operators_apply(make_client):
    client = make_client(operator_tokens=[OPERATOR], viewer_tokens=[VIEWER])
    client.post("/api/deployments", json=nixl_1p1d(), headers=AS_OPERATOR)
    observe(client, {"pd": ttft_bound("pd")})
    shown = client.get("/api/deployments/pd/proposals", headers=AS_VIEWER)
    assert shown.status_code == 200 and shown.json()["proposals"]
    body = {"rule": "ttft_binding", "revision": 1}
    refused = client.post("/api/deployments/pd/proposals/apply", json=body, headers=AS_VIEWER)
    assert refused.status_code == 403
    assert client.post("/api/deployments/pd/proposals/apply", json=body).status_code == 401
    done = client.post("/api/deployments/pd/proposals/apply", json=body, headers=AS_OPERATOR)
    assert done.status_code == 200 and done.json()["revision"] == 2


# -- the advisor panel ----------------------------------------------------------------------

HX = {"HX-Request": "true"}


def test_the_panel_lists_each_proposal_with_its_forecast_and_an_apply_button(plane):
    fragment = plane.get("/deployments/pd/advice", headers=HX).text
    assert 'data-proposal="ttft_binding" data-how="revision"' in fragment
    assert 'data-forecast="planner"' in fragment and "1P-TP1+1D-TP1 read" in fragment
    assert 'data-apply="ttft_binding"' in fragment and '"revision": "1"' in fragment


def test_the_panels_apply_stores_the_revision_and_says_so(plane):
    form = {"rule": "ttft_binding", "revision": "1", "window": "1m"}
    answer = plane.post("/deployments/pd/proposals/apply", data=form, headers=HX)
    assert answer.status_code == 200 and "<html" not in answer.text
    assert "applied ttft_binding" in answer.text and "(revision 2)" in answer.text
    assert plane.get("/api/deployments/pd").json()["revision"] == 2
    again = plane.post("/deployments/pd/proposals/apply", data=form, headers=HX)
    assert 'role="alert"' in again.text and "at revision 2" in again.text


def test_a_viewer_sees_no_apply_button_and_its_post_is_refused_in_the_panel(make_client):
    client = make_client(operator_tokens=[OPERATOR], viewer_tokens=[VIEWER])
    client.post("/api/deployments", json=nixl_1p1d(), headers=AS_OPERATOR)
    observe(client, {"pd": ttft_bound("pd")})
    fragment = client.get("/deployments/pd/advice", headers={**HX, **AS_VIEWER}).text
    assert 'data-proposal="ttft_binding"' in fragment and "data-apply" not in fragment
    form = {"rule": "ttft_binding", "revision": "1"}
    refused = client.post("/deployments/pd/proposals/apply", data=form, headers={**HX, **AS_VIEWER})
    assert "may only read" in refused.text
    assert client.get("/api/deployments/pd", headers=AS_VIEWER).json()["revision"] == 1


def test_a_busy_frontend_is_proposed_a_render_tier_and_applying_adds_the_group(make_client):
    """An engine's frame with its busiest API server at 0.95 of a core and short answers, so
    the prompt side (which a render tier takes) is a fair share of that core."""
    client = make_client()
    client.post("/api/deployments", json=nixl_1p1d())
    frame = ttft_bound("pd")
    frame["engines"] = {**frame["engines"], "output_tokens_per_request": 16.0}
    frame["engines"]["cpu_cores_max"] = 0.95
    observe(client, {"pd": frame})
    found = client.get("/api/deployments/pd/proposals").json()
    p = proposal(found, "frontend_cpu")
    assert p["how"] == "revision" and "render tier" in p["summary"]
    assert p["forecast"]["source"] is None and "frontend" in p["forecast"]["why"]
    assert p["forecast"]["predicted"] == {
        "signal": "frontend_cpu_share",
        "direction": "down",
        "now_measured": 0.95,
    }
    body = {"rule": "frontend_cpu", "revision": 1}
    applied = client.post("/api/deployments/pd/proposals/apply", json=body)
    assert applied.status_code == 200, applied.text
    groups = client.get("/api/deployments/pd").json()["spec"]["groups"]
    # 0.95 cores x the render load share at 2,000 in / 16 out (~0.62): two at half a core each
    assert [(g["name"], g["role"], g["count"]) for g in groups][-1] == ("render", "render", 2)
    assert "2 render instance(s) (sized to half a core each" in p["summary"]


def marked(evidence: dict) -> dict:
    return {**ttft_bound("pd"), "evidence": evidence}


def test_an_idle_window_proposes_nothing_and_says_why(make_client):
    from observe.sections.evidence import judge

    client = make_client()
    client.post("/api/deployments", json=nixl_1p1d())
    observe(client, {"pd": marked(judge(0, [], "1m", 60.0, 1000.0))})
    result = client.get("/api/deployments/pd/proposals").json()
    assert result["proposals"] == []
    assert result["not_enough_evidence"].startswith("not enough evidence (no real traffic: 0 real")
    advice = client.get("/api/deployments/pd/advice").json()
    ttft = next(v for v in advice["verdicts"] if v["rule"] == "ttft_binding")
    assert ttft["triggered"] is None and ttft["advice"] == result["not_enough_evidence"]
    refused = client.post(
        "/api/deployments/pd/proposals/apply", json={"rule": "ttft_binding", "revision": 1}
    )
    assert refused.status_code == 409 and "not enough evidence" in refused.json()["detail"]


def test_right_after_a_switch_nothing_is_proposed_then_it_is_again(make_client):
    from types import SimpleNamespace

    from observe.sections.evidence import judge, marks

    switch = SimpleNamespace(
        id="2", kind="switch", strategy="hold", state="done", started_at=990.0, ended_at=995.0
    )
    client = make_client()
    client.post("/api/deployments", json=nixl_1p1d())
    observe(client, {"pd": marked(judge(240, marks([switch], 1000.0, 400.0), "1m", 60.0, 1000.0))})
    result = client.get("/api/deployments/pd/proposals").json()
    assert (
        result["proposals"] == []
        and "a mode switch (rollout 2, hold) ended 5 s ago" in (result["not_enough_evidence"])
    )
    later = judge(240, marks([switch], 1075.0, 400.0), "1m", 60.0, 1075.0)
    observe(client, {"pd": marked(later)})
    again = client.get("/api/deployments/pd/proposals").json()
    assert again["not_enough_evidence"] is None
    assert [p["rule"] for p in again["proposals"]] == ["ttft_binding"]


def test_the_panel_shows_the_changes_in_words_and_the_measured_baseline(plane):
    from tests.web.routes.advise.test_advice_api import HX

    panel = plane.get("/deployments/pd/advice", params={"window": "10s"}, headers=HX).text
    assert "<li>group prefill: tp: 1 → 2</li>" in panel
    assert "{&#39;" not in panel and "{'" not in panel
    assert "<span data-baseline>1500</span> measured → ~" in panel


def test_the_panel_says_not_enough_evidence_on_an_idle_window(make_client):
    from observe.sections.evidence import judge
    from tests.web.routes.advise.test_advice_api import HX

    client = make_client()
    client.post("/api/deployments", json=nixl_1p1d())
    observe(client, {"pd": marked(judge(3, [], "1m", 60.0, 1000.0))})
    panel = client.get("/deployments/pd/advice", headers=HX).text
    assert "data-not-enough-evidence" in panel
    assert "not enough evidence (3 real request(s) in the 1m window, 20 needed" in panel
    assert 'data-rule="ttft_binding" data-triggered="null"' in panel
    assert "data-proposals" not in panel
