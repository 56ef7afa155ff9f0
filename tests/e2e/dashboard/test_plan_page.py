"""The plan and KV pages in a real browser (Debian's Chromium, headless, through Playwright)
against a real `pdctl serve` with tokens: submit the planner's form as prefilled (the MORI-IO
scenario's sweep) and see the chart drawn and a row per configuration and rate; read the KV
calculator's figure for Llama-3.1-70B at 10k tokens."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from harness.processes import Process
from tests.e2e.dashboard.test_browser import CHROMIUM, FLAGS, _playwright, serve, sign_in

pytestmark = pytest.mark.e2e

MORI_CONFIGS = ("colocated-tp8", "colocated-2xtp4", "disagg-read", "disagg-write")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    # The published sweep takes ~10 s here and more on a loaded CI machine: the default 15 s
    # deadline would cut it short (a behaviour tests/web/routes/advise/test_plan_api.py covers).
    proc = serve(tmp_path_factory.mktemp("plan-page"), extra={"PDCTL_PLAN_DEADLINE_S": "120"})
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def page(plane: Process):
    sync_api = _playwright()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1200})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in(page, plane.url)
        try:
            yield page
        finally:
            context.close()
            browser.close()
        assert not errors, errors


def test_the_prefilled_plan_draws_its_chart_and_a_row_per_config_and_rate(plane, page):
    page.click("nav >> text=Plan")
    page.wait_for_url(plane.url + "/plan")
    assert page.input_value("#p-configs").split() == list(MORI_CONFIGS)
    started = time.monotonic()
    page.click("button[data-action=plan]")
    page.wait_for_selector("#plan-chart[data-drawn='1'] canvas", timeout=150_000)
    took = time.monotonic() - started
    assert page.get_attribute("#plan-chart", "data-series-count") == "4"
    rates = 20  # 0.5:10:0.5
    for config in MORI_CONFIGS:
        assert page.locator(f"#plan-rows tr[data-config='{config}']").count() == rates
    assert page.locator("[data-goodput-config]").count() == 4
    assert page.locator("[data-calibration]").count() >= 1
    assert "run=1" in page.url  # the result has an address of its own
    print(
        f"plan page: the published sweep (4 x 20 x 100 requests) in {took:.1f} s, "
        f"server {page.get_attribute('[data-wall-s]', 'data-wall-s')} s"
    )


def test_the_kv_calculator_reads_about_3_3_gb_for_llama_70b_at_10k_tokens(plane, page):
    page.click("nav >> text=KV")
    page.wait_for_url(plane.url + "/tools/kv")
    page.select_option("#kv-model", "llama-3.1-70b")
    page.fill("#kv-tokens", "20000")
    page.click("#kv-form button[type=submit]")
    page.wait_for_selector("#kv-gb:has-text('6.55 GB')", timeout=60_000)
    page.fill("#kv-tokens", "10000")
    page.click("#kv-form button[type=submit]")
    page.wait_for_selector("#kv-gb:has-text('3.28 GB')", timeout=60_000)
    gb = float(page.get_attribute("[data-kv-gb]", "data-kv-gb"))
    assert 3.2 <= gb <= 3.4
    page.select_option("#kv-hardware", "l40s")
    page.click("#kv-form button[type=submit]")
    # The H100's answer also has a host row: wait for the L40S's (its path inside a node is
    # through the host), then read the row from it.
    page.wait_for_selector("#kv-path-in-node:text-is('host')", timeout=60_000)
    staged = page.wait_for_selector("#kv-handoff tr[data-path='host'] [data-times-bandwidth]")
    assert float(staged.get_attribute("data-times-bandwidth")) > 20  # tens of times its PCIe
