"""The deployment page's "where each TTFT went" panel: the slowest requests of the window with
their parts, the estimate labelled, and a stacked bar per interval."""

from __future__ import annotations

import time

from domain.measures.ttft_parts import TtftParts
from tests.web.routes.advise.test_advice_api import FakeObserver, live_frame
from web.pages import ttft


def entry(rid: str, ttft_ms: float, transfer_ms: float | None, ago: float = 5.0) -> dict:
    transfer = None if transfer_ms is None else transfer_ms / 1000
    parts = TtftParts(
        0.001,
        0.0,
        0.04,
        transfer,
        (ttft_ms - 41 - (transfer_ms or 0)) / 1000,
        None if transfer is None else "engine",
    )
    return {
        "time": time.time() - ago,
        "request_id": "x" * 20 + rid,
        "outcome": "ok",
        "group": "read",
        "prefill": "http://p",
        "decode": "http://d",
        "ttft_ms": ttft_ms,
        "ttft_parts": parts.to_json(),
    }


def test_the_panel_lists_the_slowest_first_and_labels_the_estimate(pd_and_solo, monkeypatch):
    plane = pd_and_solo
    frame = live_frame("pd")
    frame["kv"] = {**frame.get("kv", {}), "xfer_p50_ms": 12.0}
    plane.app.state.observer = FakeObserver({"pd": frame})
    log = [entry("aaaa", 90, 10), entry("bbbb", 400, None), entry("cccc", 150, 30, ago=50)]

    async def fake_log(request, name):
        return log, None

    monkeypatch.setattr(ttft, "proxy_log", fake_log)
    html = plane.get("/deployments/pd/ttft", headers={"HX-Request": "true"}).text
    assert 'data-requests="3"' in html
    order = [html.index(f'{"x" * 20}{rid}"') for rid in ("bbbb", "cccc", "aaaa")]
    assert order == sorted(order)
    slow_row = html[order[0] : order[1]]
    assert "400.0" in slow_row and "12.0 <i>estimate</i>" in slow_row
    assert html.count('class="ttft-bar"') == 12
    assert 'data-part="transfer"' in html


def test_without_a_controller_the_panel_says_why(pd_and_solo):
    html = pd_and_solo.get("/deployments/pd/ttft").text
    assert "runs without a controller" in html and "No request in this window." in html


def test_the_deployment_page_polls_the_panel(pd_and_solo):
    page = pd_and_solo.get("/deployments/pd").text
    assert 'hx-get="/deployments/pd/ttft"' in page and "Where each TTFT went" in page
