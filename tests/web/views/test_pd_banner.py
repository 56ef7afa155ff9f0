"""The deployment page's "is PD happening?" banner, the advisor's verdict on it and the
control plane's /metrics gauges, from a frame's `pd` section (observe/sections/pd_check.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from harness.processes import metric_value
from tests.web.routes.advise.test_advice_api import FakeObserver, live_frame
from web.metrics import pd_families

SINCE = 1_764_610_201.0  # 17:30:01 UTC


def pd_section(status: str = "recomputing", share: float | None = 0.0) -> dict:
    row = {
        "instance": "decode-0",
        "status": status,
        "share": share,
        "since": SINCE if status == "recomputing" else None,
        "prompt_tokens": 6000.0,
        "cache_hit_tokens": 0.0,
        "requests": 6.0,
        "failed_transfers": 0.0,
    }
    return {
        "applies": True,
        "why": None,
        "rule": {"window": "10s"},
        "decodes": [row],
        "recomputing": ["decode-0"] if status == "recomputing" else [],
    }


def test_the_banner_names_the_recomputing_decode_and_since_when(pd_and_solo):
    plane = pd_and_solo
    plane.app.state.observer = FakeObserver({"pd": {**live_frame("pd"), "pd": pd_section()}})
    page = plane.get("/deployments/pd").text
    assert 'id="pd-banner"' in page and 'data-pd="recomputing"' in page and 'role="alert"' in page
    assert "PD is not happening:" in page
    assert "decode-0 recomputes its prompts since 17:30:01 UTC (0% of prompt tokens" in page
    advice = plane.get("/api/deployments/pd/advice").json()
    verdict = next(v for v in advice["verdicts"] if v["rule"] == "pd_not_happening")
    assert verdict["triggered"] is True and "no KVConnector found" in verdict["advice"]


def test_a_healthy_pair_has_no_banner_and_colocated_says_the_check_does_not_apply(pd_and_solo):
    plane = pd_and_solo
    healthy = {**live_frame("pd"), "pd": pd_section("ok", 0.99)}
    plane.app.state.observer = FakeObserver({"pd": healthy})
    page = plane.get("/deployments/pd").text
    assert 'data-pd="ok"' in page and "PD is not happening" not in page
    solo = plane.get("/deployments/solo").text
    assert 'data-pd="not_applicable"' in solo and "PD check does not apply (colocated" in solo
    assert 'role="alert"' not in solo.split('id="pd-banner"')[1].split(">")[0]


def test_metrics_say_which_decode_recomputes_and_since_when():
    latest = {
        "pd": {"1m": {"pd": pd_section()}},
        "ok": {"1m": {"pd": pd_section("ok", 0.99)}},
        "solo": {"1m": {"pd": {"applies": False, "decodes": []}}},
    }

    class Latest:
        def collect(self):
            yield from pd_families(latest)

    registry = CollectorRegistry()
    registry.register(Latest())
    text = generate_latest(registry).decode()
    assert 'pdctl_pd_recomputing{deployment="pd",instance="decode-0"} 1.0' in text
    assert 'pdctl_pd_recomputing{deployment="ok",instance="decode-0"} 0.0' in text
    assert 'pdctl_pd_transfer_share{deployment="ok",instance="decode-0"} 0.99' in text
    since = metric_value(text, "pdctl_pd_recomputing_since_seconds", deployment="pd")
    assert since == SINCE
    assert "solo" not in text
