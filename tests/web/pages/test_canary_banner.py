"""The correctness canary beside the SLO figures: the deployment page's line, the advisor's
verdict, `pdctl top`'s line and the control plane's /metrics, from a frame's `canary`
section and the canary's state (observe/canary/state.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from harness.processes import metric_value
from observe.canary.state import CanaryState, Difference, Verdict, section, step
from terminal.top.format import ASCII
from terminal.top.view import View, render
from tests.web.routes.advise.test_advice_api import FakeObserver, live_frame
from web.metrics import canary_families

AT = 1_764_610_201.0  # 17:30:01 UTC


def failing() -> CanaryState:
    verdict = Verdict("mismatch", AT, "http://p:1", "http://d:2", Difference(3, "ba", "ke"))
    return step(CanaryState(), verdict)[0]


def test_a_failing_canary_shows_on_the_page_and_the_advisor_fires(pd_and_solo):
    plane = pd_and_solo
    frame = {**live_frame("pd"), "canary": section(failing(), 30, True, None)}
    plane.app.state.observer = FakeObserver({"pd": frame})
    page = plane.get("/deployments/pd").text
    assert 'data-canary="failing"' in page and 'id="canary-banner"' in page
    assert "canary FAILING since 17:30:01 UTC" in page and "http://d:2" in page
    advice = plane.get("/api/deployments/pd/advice").json()
    verdict = next(v for v in advice["verdicts"] if v["rule"] == "canary_failing")
    assert verdict["triggered"] is True and "overstate" in verdict["advice"]


def test_a_passing_canary_is_quiet_and_no_frame_hides_the_line(pd_and_solo):
    plane = pd_and_solo
    ok = step(CanaryState(), Verdict("ok", AT, "http://p:1", "http://d:2"))[0]
    frame = {**live_frame("pd"), "canary": section(ok, 30, True, None)}
    plane.app.state.observer = FakeObserver({"pd": frame})
    page = plane.get("/deployments/pd").text
    assert 'data-canary="ok"' in page and "FAILING" not in page
    advice = plane.get("/api/deployments/pd/advice").json()
    verdict = next(v for v in advice["verdicts"] if v["rule"] == "canary_failing")
    assert verdict["triggered"] is False
    plane.app.state.observer = FakeObserver({})
    assert 'id="canary-banner"' in (page := plane.get("/deployments/pd").text)
    assert 'data-canary="off"' in page


def test_top_shows_one_canary_line():
    frame = {**live_frame("pd"), "canary": section(failing(), 30, True, None)}
    screen = render(View("pd", "1m", frame), 200, 24, ASCII)
    [line] = [s for s in screen if "CANARY" in s]
    assert line.startswith("CANARY FAILING since 17:30:01 UTC") and "token 3" in line
    assert not [
        s for s in render(View("pd", "1m", live_frame("pd")), 200, 24, ASCII) if "anary" in s
    ]


def test_metrics_count_checks_by_result_and_the_failing_pairs():
    class States:
        def collect(self):
            yield from canary_families({"pd": failing(), "ok": CanaryState()})

    registry = CollectorRegistry()
    registry.register(States())
    text = generate_latest(registry).decode()
    checks = "pdctl_canary_checks_total"
    assert metric_value(text, checks, deployment="pd", result="mismatch") == 1
    assert metric_value(text, checks, deployment="pd", result="ok") == 0
    assert metric_value(text, "pdctl_canary_failing", deployment="pd") == 1
    assert metric_value(text, "pdctl_canary_failing", deployment="ok") == 0
    assert metric_value(text, "pdctl_canary_last_check_timestamp_seconds", deployment="pd") == AT
