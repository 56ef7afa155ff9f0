"""The rejected share beside SLO attainment: the control plane's /metrics from frames built
out of scripted proxy scrapes, and the deployment page's attainment tile that the live frames
fill (the Chromium run is tests/e2e/dashboard/test_outage_numbers.py)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from harness.processes import metric_value
from observe.build import build_frame
from services.load import LoadRun
from tests.observe.series import proxy_text
from tests.observe.test_build import INFO, UNITS, target
from web.metrics import frame_families


def outage_frame() -> dict:
    """A minute in which the only decode was lost: 2 met, 1 failed, 57 rejected."""
    proxy = target(
        [
            (0.0, proxy_text(arrival_gaps=0)),
            (60.0, proxy_text(ok=2, failed=1, rejected=57, met_all=2, arrival_gaps=60)),
        ]
    )
    return build_frame(INFO, UNITS, {"proxy": proxy}, "1m", 60.0)


def scrape(latest: dict) -> str:
    class Frames:
        def collect(self):
            yield from frame_families(latest)

    registry = CollectorRegistry()
    registry.register(Frames())
    return generate_latest(registry).decode()


def test_metrics_say_the_outage_and_its_rejected_share() -> None:
    text = scrape({"pd": {"1m": outage_frame()}})
    assert metric_value(text, "pdctl_slo_attainment", deployment="pd") == pytest.approx(2 / 60)
    assert metric_value(text, "pdctl_request_rate", deployment="pd") == pytest.approx(1.0)
    share = metric_value(text, "pdctl_request_rejected_share", deployment="pd")
    assert share == pytest.approx(57 / 60)
    rate = metric_value(text, "pdctl_request_rejected_rate", deployment="pd")
    assert rate == pytest.approx(57 / 60)


def test_no_traffic_leaves_the_shares_out_and_the_rejected_rate_at_zero() -> None:
    proxy = target([(0.0, proxy_text()), (60.0, proxy_text())])
    idle = build_frame(INFO, UNITS, {"proxy": proxy}, "1m", 60.0)
    text = scrape({"idle": {"1m": idle}})
    assert 'pdctl_slo_attainment{deployment="idle"}' not in text
    assert 'pdctl_request_rejected_share{deployment="idle"}' not in text
    assert metric_value(text, "pdctl_request_rejected_rate", deployment="idle") == 0.0


def test_the_attainment_tile_has_the_rejected_share_and_rate(pd_and_solo) -> None:
    page = pd_and_solo.get("/deployments/pd").text
    tile = page[page.index('id="tile-attainment"') :]
    tile = tile[: tile.index("</div>")]
    assert 'data-k="rejected_share" data-fmt="pct"' in tile
    assert 'data-k="rejected" data-fmt="rate"' in tile
    assert "req/s at the proxy, rejected ones too" in page
    assert 'data-series="request_goodput,request_rate,rejected_rate"' in page


def test_the_last_load_run_says_how_many_of_its_failures_were_rejected(pd_and_solo) -> None:
    result = {"completed": 90, "failed": 90, "rejected": 58, "slo_attainment": 0.5}
    run = LoadRun("pd", 5.0, 180, state="done", result=result)
    pd_and_solo.app.state.load_runs.runs["pd"] = run
    page = pd_and_solo.get("/deployments/pd").text
    assert "completed 90, failed 90 (58 rejected), SLO attainment 50.0%" in page
    run.result = {"completed": 180, "failed": 0, "rejected": 0, "slo_attainment": 1.0}
    assert (
        "completed 180, failed 0, SLO attainment 100.0%" in pd_and_solo.get("/deployments/pd").text
    )
