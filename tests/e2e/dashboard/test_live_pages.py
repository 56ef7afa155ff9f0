"""The deployment page stays live and complete, in headless Chromium against a real
`pdctl serve` running a stand-in MoRIIO pair (issue 35, part 4):
- the KV transfer time panel shows the engines' own times (vllm:moriio_xfer_time_seconds, what
  `pdctl top` prints), for the past the page loads as well as for new frames;
- a `pdctl bench --deployment` run from a terminal appears in the Bench panel, no reload;
- after a read -> write switch the header says write mode and the new revision, no reload;
  the primary button is Stop while it runs."""

from __future__ import annotations

import contextlib
import json

import pytest

from harness.control_plane import ControlPlane
from tests.e2e.dashboard.test_browser import CHROMIUM, FLAGS, _playwright, wait_attr
from tests.e2e.serve.test_control_plane import moriio
from tests.terminal.verbs_run import pdctl

pytestmark = pytest.mark.e2e
NAME = "live"


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    plane = ControlPlane(tmp_path_factory.mktemp("live")).start()
    try:
        status, created = plane.api("POST", "/deployments", moriio(NAME))
        assert status == 201, created
        assert plane.api("POST", f"/deployments/{NAME}/start")[0] == 202
        plane.running(NAME)
        plane.rolled_out(NAME)
        yield plane
    finally:
        status, _ = plane.api("POST", f"/deployments/{NAME}/stop")
        if status == 202:
            with contextlib.suppress(TimeoutError):
                plane.wait(
                    NAME,
                    lambda us: all(u["state"] in ("STOPPED", "EXITED") for u in us.values()),
                    30,
                )
        plane.close()


@pytest.fixture
def browser():
    if not CHROMIUM.exists():
        pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium")
    sync_api = _playwright()
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    page.js_errors = []
    page.on("pageerror", lambda exc: page.js_errors.append(str(exc)))
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(url)
    page.evaluate("window.__loaded_once = true")  # gone if the page reloads
    page.wait_for_selector("#live-status[data-live=open]", timeout=60_000)
    return page


def test_a_cli_bench_appears_and_the_kv_time_panel_shows_the_engines_times(plane, browser):
    url = plane.proc.url
    page = open_page(browser, f"{url}/deployments/{NAME}")
    page.wait_for_selector("#bench-runs", timeout=60_000)
    assert page.locator("#bench-runs tr[data-run-id]").count() == 0

    ran = pdctl(
        *("bench", "--deployment", NAME, "--server", url, "--request-rate", "8"),
        *("--num-prompts", "120", "--input-len", "64", "--output-len", "8"),
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert f"of {NAME} (revision 1): its page's Bench panel" in ran.stderr
    run_id = ran.stderr.split("kept as bench run ", 1)[1].split()[0]

    # the Bench panel lists it on the bench event, without a reload
    row = f"#bench-runs tr[data-run-id='{run_id}'][data-status=done]"
    page.wait_for_selector(row, timeout=30_000)
    assert "pdctl bench" in page.inner_text(row) and "8 × 120" in page.inner_text(row)
    assert page.evaluate("window.__loaded_once") is True

    # the KV transfer time: the engines' own figures, as pdctl top prints them
    last = json.loads(wait_attr(page, "#chart-xfer", "data-last", lambda v: '"xfer_p50_ms":2' in v))
    assert last["xfer_p50_ms"] == pytest.approx(2.5) and 2.5 < last["xfer_p99_ms"] <= 5.0
    assert page.inner_text("#chart-xfer figcaption").startswith("KV transfer time 2.5 ms / ")
    assert page.get_attribute("#live", "data-kv-source") == "moriio"
    assert page.js_errors == [], page.js_errors

    # a page opened now draws the past too: history points carry the transfer times
    fresh = open_page(browser, f"{url}/deployments/{NAME}")
    wait_attr(fresh, "#live", "data-frames", lambda v: int(v) >= 2, 30)
    frames, filled = fresh.evaluate(  # read together: both move with each frame
        "[+document.getElementById('live').dataset.frames,"
        " +document.getElementById('chart-xfer').dataset.filled]"
    )
    assert filled > frames + 1, (filled, frames)
    assert fresh.js_errors == [], fresh.js_errors


def test_the_header_follows_a_switch_without_a_reload(plane, browser):
    url = plane.proc.url
    page = open_page(browser, f"{url}/deployments/{NAME}")
    before = int(page.get_attribute("#head-revision", "data-revision"))
    assert page.get_attribute("#head-modes", "data-modes") == "read"
    assert "read mode" in page.inner_text(".deployment-bar .meta")
    # running: Stop is the primary action, Start is not
    page.wait_for_selector("#lifecycle button.primary[data-action=stop]", timeout=30_000)
    assert page.locator("#lifecycle button.primary").count() == 1

    switched = plane.switch(NAME, "write", "hold")
    assert switched["state"] == "done", switched
    revision = plane.api("GET", f"/deployments/{NAME}")[1]["revision"]
    assert revision > before

    wait_attr(page, "#head-modes", "data-modes", lambda v: v == "write", 30)
    wait_attr(page, "#head-revision", "data-revision", lambda v: v == str(revision), 30)
    meta = page.inner_text(".deployment-bar .meta")
    assert "write mode" in meta and "read mode" not in meta and f"rev {revision}" in meta
    assert page.evaluate("window.__loaded_once") is True  # no reload happened
    page.wait_for_selector("#lifecycle button.primary[data-action=stop]", timeout=30_000)
    assert page.js_errors == [], page.js_errors
