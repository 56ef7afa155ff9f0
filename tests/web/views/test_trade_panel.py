"""The first screen's trade panel: the pure view (bars, card, headline) and the page with the
pair stored but not started (no controller, so nothing runs)."""

from __future__ import annotations

from controller.spec.rules import check
from services.demo.deployments import ensure_demo
from services.demo.trade import (
    COLOCATED_NAME,
    DISAGG_NAME,
    TIME_SCALE,
    colocated_body,
    disagg_body,
    trade_specs,
)
from web.views import trade_panel

# vLLM's ITL buckets as the frame carries them: [upper bound, count in window]
ITL = {
    "buckets": [[0.1, 0], [0.15, 10], [0.2, 900], [0.3, 40], [1.0, 0], [2.5, 30], [None, 0]],
    "count": 980,
    "p50": 0.18,
    "p90": 0.2,
    "p99": 2.1,
}


def frame(itl=ITL, ttft_p99=2.4):
    ttft = {"buckets": [], "count": 20, "p50": 1.7, "p90": 2.3, "p99": ttft_p99}
    return {"itl": itl, "ttft": ttft, "slo_attainment": 0.0}


def test_the_pair_is_the_published_layouts_slowed_alike():
    colocated, disagg = trade_specs()
    for spec in (colocated, disagg):
        check(spec)
        assert spec.engine.value == "sim" and spec.hardware == "mi300x"
        assert spec.time_scale == TIME_SCALE and not spec.prefix_caching
        assert spec.slo.itl_ms == 50 * TIME_SCALE and spec.slo.ttft_ms == 1000 * TIME_SCALE
    assert [(g.count, g.tp) for g in colocated.groups] == [(2, 4)]
    assert {g.role.value: g.tp for g in disagg.groups} == {"prefill": 4, "decode": 4}
    assert colocated_body()["name"] == COLOCATED_NAME and disagg_body()["name"] == DISAGG_NAME


def test_bars_mark_the_buckets_past_the_itl_target():
    bars = trade_panel.bars(ITL, slo_itl_ms=400)
    labels = [b["label"] for b in bars]
    assert labels == ["0-100", "100-150", "150-200", "200-300", "300-1s", "1s-2.5s", ">2.5s"]
    over = [b["label"] for b in bars if b["over"]]
    assert over == ["1s-2.5s", ">2.5s"]
    spike = next(b for b in bars if b["label"] == "1s-2.5s")
    assert spike["count"] == 30 and 0 < spike["height"] < 100  # log scale: a 3% tail shows
    assert max(b["height"] for b in bars) == 100


def test_bars_of_no_frame_are_none():
    assert trade_panel.bars(None, 400) == [] and trade_panel.bars({"buckets": []}, 400) == []


def test_card_lists_only_the_rules_that_apply():
    spec = trade_specs()[0]
    advice = {
        "verdicts": [
            {"rule": "itl_interference", "triggered": True, "advice": "disaggregate"},
            {"rule": "multi_turn", "triggered": None, "advice": "no signal"},
            {"rule": "light_traffic", "triggered": False, "advice": "heavy enough"},
        ]
    }
    card = trade_panel.card(spec, "running", frame(), advice)
    assert [v["rule"] for v in card["applies"]] == ["itl_interference"] and card["unknown"] == 1
    assert card["itl_p99"] == 2100 and card["ttft_p99"] == 2400 and card["requests"] == 20
    assert card["layout"] == "colocated: 2 x colocated TP4"
    idle = trade_panel.card(spec, "stopped", None, None)
    assert idle["live"] is False and idle["itl_p99"] is None and idle["bars"] == []


def test_headline_needs_both_sides():
    spec_c, spec_d = trade_specs()
    flat = {**ITL, "p99": 0.25}
    c = trade_panel.card(spec_c, "running", frame(), None)
    d = trade_panel.card(spec_d, "running", frame(flat, ttft_p99=4.8), None)
    claim = trade_panel.headline(c, d)
    assert round(claim["itl_ratio"], 1) == 8.4 and round(claim["ttft_ratio"], 1) == 2.0
    assert trade_panel.headline(c, trade_panel.card(spec_d, "stopped", None, None)) is None


def test_first_screen_shows_the_pair_labelled_simulated(make_client):
    client = make_client(demo=True, demo_trade=True, controller=False)
    names = [d["name"] for d in client.get("/api/deployments").json()]
    assert sorted(names) == sorted(["demo", COLOCATED_NAME, DISAGG_NAME])
    page = client.get("/").text
    assert 'id="trade"' in page and "The trade, live" in page and "simulated" in page
    assert f'href="/deployments/{COLOCATED_NAME}"' in page
    assert f'href="/deployments/{DISAGG_NAME}"' in page
    assert "Waiting for a minute of finished requests" in page  # no frames: nothing runs
    fragment = client.get("/demo/trade", headers={"HX-Request": "true"}).text
    assert f'data-trade="{DISAGG_NAME}"' in fragment and "<html" not in fragment
    assert ensure_demo(client.app.state.store, trade=True) is False  # only into an empty store


def test_no_trade_panel_without_the_pair(make_client):
    client = make_client(demo=True)  # the tiny demo only: PDCTL_DEMO_TRADE is off by default
    assert [d["name"] for d in client.get("/api/deployments").json()] == ["demo"]
    assert 'id="trade"' not in client.get("/").text
