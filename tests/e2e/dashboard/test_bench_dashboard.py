"""Bench runs from the dashboard, with real processes: `pdctl serve` starts a stand-in MoRIIO
deployment in read mode; a sweep started through the API reports progress and is stored with
revision 1; after a read -> write switch a second sweep is stored with revision 2; the compare
endpoint gives both curves; and headless Chromium sees the Bench panel, starts a run from its
form, ticks the two sweeps and gets their curves drawn with a legend naming both. A sweep
stopped during its second rate keeps the first, and compares as a partial curve."""

from __future__ import annotations

import contextlib
import time

import pytest

from harness.control_plane import ControlPlane
from harness.processes import ROOT, http_get
from tests.e2e.dashboard.test_browser import CHROMIUM, FLAGS, _playwright
from tests.e2e.serve.test_control_plane import moriio

pytestmark = pytest.mark.e2e

SWEEP = {"rates": [2, 4], "num_prompts": 10, "input_len": 16, "output_len": 8}
PACES = {"rates": [20, 0.5], "num_prompts": 6, "input_len": 16, "output_len": 4}
ARTIFACTS = ROOT / "artifacts" / "browser"


def sweep(plane: ControlPlane) -> tuple[dict, list[int]]:
    """Start a sweep of deployment `mori`, follow it to its end; the run and the `done`
    counts seen on the way."""
    status, run = plane.api("POST", "/deployments/mori/bench", SWEEP)
    assert status == 202, run
    seen = [run["done"]]
    deadline = time.monotonic() + 45
    while run["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.3)
        run = plane.api("GET", f"/bench/{run['id']}")[1]
        seen.append(run["done"])
    assert run["status"] == "done", run
    return run, seen


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    plane = ControlPlane(tmp_path_factory.mktemp("bench")).start()
    try:
        status, created = plane.api("POST", "/deployments", moriio("mori"))
        assert status == 201, created
        assert plane.api("POST", "/deployments/mori/start")[0] == 202
        plane.running("mori")
        yield plane
    finally:
        status, _ = plane.api("POST", "/deployments/mori/stop")
        if status == 202:
            with contextlib.suppress(TimeoutError):
                plane.wait(
                    "mori",
                    lambda us: all(u["state"] in ("STOPPED", "EXITED") for u in us.values()),
                    30,
                )
        plane.close()


@pytest.fixture(scope="module")
def two_sweeps(plane):
    read, seen = sweep(plane)
    switched = plane.switch("mori", "write", "hold")
    assert switched["state"] == "done", switched
    plane.running("mori")
    write, _ = sweep(plane)
    return read, seen, write


def test_sweeps_are_stored_with_their_revision_and_compare_as_curves(plane, two_sweeps):
    read, seen, write = two_sweeps
    between = sorted({d for d in seen if 0 < d < 20})
    assert len(between) >= 2, f"progress did not move by steps: {seen}"
    assert seen == sorted(seen) and seen[-1] == 20
    assert (read["revision"], read["topology"]["shape"]) == (1, "read 1P1D")
    assert (write["revision"], write["topology"]["shape"]) == (2, "write 1P1D")
    for run in (read, write):
        assert [r["request_rate"] for r in run["result"]["runs"]] == [2.0, 4.0]
        assert sum(r["completed"] for r in run["result"]["runs"]) == 20
    status, listed = plane.api("GET", "/deployments/mori/bench")
    assert status == 200 and [r["id"] for r in listed] == [write["id"], read["id"]]
    status, compared = plane.api("GET", f"/bench/compare?ids={read['id']},{write['id']}")
    assert status == 200
    curves = compared["runs"]
    assert [c["label"] for c in curves] == ["mori r1 · read 1P1D", "mori r2 · write 1P1D"]
    for curve in curves:
        assert [p["rate"] for p in curve["points"]] == [2.0, 4.0]
        assert all(0 <= p["slo_attainment"] <= 1 and p["p99_ttft_ms"] > 0 for p in curve["points"])


def test_the_browser_starts_a_run_and_overlays_two(plane, two_sweeps):
    read, _, write = two_sweeps
    if not CHROMIUM.exists():
        pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium")
    sync_api = _playwright()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            page.goto(plane.proc.url + "/deployments/mori")
            page.wait_for_selector(f"#bench-runs tr[data-run-id='{write['id']}']", timeout=60_000)

            # a short run from the form: its progress bar, then its row in the list
            page.fill("#bench-rates", "8")
            page.fill("#bench-num_prompts", "16")
            page.fill("#bench-input_len", "16")
            page.fill("#bench-output_len", "4")
            page.click("button[data-action=bench-start]")
            page.wait_for_selector("#bench-progress", timeout=60_000)
            page.wait_for_selector("#bench-form", timeout=60_000)  # ended: the form is back
            page.wait_for_selector("#bench-runs tr[data-status=done] >> nth=2", timeout=60_000)

            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.locator("#bench-section").screenshot(path=str(ARTIFACTS / "bench-panel.png"))

            # tick the two sweeps and compare them
            page.check(f"#bench-runs input[name=id][value='{read['id']}']")
            page.check(f"#bench-runs input[name=id][value='{write['id']}']")
            page.click("button[data-action=bench-compare]")
            page.wait_for_url("**/bench/compare?*", timeout=60_000)
            page.wait_for_selector("#chart-attainment[data-curves='2'] canvas", timeout=60_000)
            legend = page.inner_text("#chart-attainment .u-legend")
            assert "mori r1 · read 1P1D" in legend and "mori r2 · write 1P1D" in legend
            assert page.locator("figure[data-chart=bench] canvas").count() == 3
            assert page.locator(f".bench-table tr[data-run-id='{write['id']}']").count() == 2
            page.screenshot(path=str(ARTIFACTS / "bench-compare.png"), full_page=True)
            assert errors == [], errors
        finally:
            browser.close()


def test_a_sweep_stopped_part_way_keeps_its_measured_rates(plane):
    """Stopped during its second rate (0.5 req/s: arrivals over ~18 s), a sweep keeps the first
    rate's figures, says so, and compares as a partial curve of that one rate."""
    status, run = plane.api("POST", "/deployments/mori/bench", PACES)
    assert status == 202, run
    deadline = time.monotonic() + 45
    while run["done"] <= PACES["num_prompts"]:  # a request of the second rate is done
        assert run["status"] == "running" and time.monotonic() < deadline, run
        time.sleep(0.2)
        run = plane.api("GET", f"/bench/{run['id']}")[1]
    status, stopped = plane.api("POST", f"/bench/{run['id']}/stop")
    assert status == 202 and stopped["status"] == "stopped", stopped

    status, kept = plane.api("GET", f"/bench/{run['id']}")
    assert status == 200 and kept["status"] == "stopped" and kept["partial"] is True
    assert kept["error"].startswith("stopped by ")
    assert kept["error"].endswith(" after 1 of 2 rates; kept 1"), kept["error"]
    [first] = kept["result"]["runs"]
    assert first["request_rate"] == 20.0
    assert first["completed"] + first["failed"] == PACES["num_prompts"]
    assert first["completed"] > 0 and 0 <= first["slo_attainment"] <= 1
    assert first["p99_ttft_ms"] > 0
    assert kept["result"]["partial"] == {"rates_done": 1, "rates": 2}

    status, compared = plane.api("GET", f"/bench/compare?ids={run['id']}")
    [curve] = compared["runs"]
    assert status == 200 and curve["partial"] is True
    assert [(p["rate"], p["completed"]) for p in curve["points"]] == [(20.0, first["completed"])]
    status, page = http_get(f"{plane.proc.url}/bench/compare?ids={run['id']}", timeout=30)
    html = page.decode()
    assert status == 200
    assert html.count(f'<tr data-run-id="{run["id"]}" data-partial>') == 1
    assert "(partial: 1 of 2 rates)" in html and "stopped part-way" in html
    assert f"{first['slo_attainment'] * 100:.1f}%" in html
