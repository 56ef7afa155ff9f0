"""The dashboard in a real browser (Debian's Chromium, headless, driven by Playwright; no
browser download) against a real `pdctl serve` with tokens: sign in, create a deployment
through the form (a bad field first), start it, load it, watch the histograms fill and the
percentiles move, switch its mode and see the event, stop it. Screenshots of the deployment
page under load are kept under artifacts/ (git-ignored)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import pytest

from harness.processes import (
    ROOT,
    Process,
    free_port,
    http_get,
    http_post,
    port_range,
    reap_instances,
)
from harness.stack import bench_background
from tests.e2e.pd_checks.test_pd_happening import clear_fault
from tests.e2e.serve.test_control_plane import moriio
from tests.terminal.verbs_run import pdctl

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "artifacts" / "browser"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "op-secret"
AS_ALICE = {"Authorization": f"Bearer {TOKEN}"}
WEB_MORIIO = moriio("web")  # a stand-in MoRIIO pair in read mode


def _playwright():
    if not CHROMIUM.exists():
        pytest.skip(
            "Debian's Chromium is not installed at /usr/bin/chromium "
            "(`make system-deps` installs it)"
        )
    return pytest.importorskip("playwright.sync_api")


def serve(tmp_path: Path, port: int | None = None, extra: dict | None = None) -> Process:
    port = port or free_port()
    env = {
        "PDCTL_RUNTIME_DIR": str(tmp_path / "runs"),
        "PDCTL_PORT_RANGE": port_range(),
        "PDCTL_SIM_REGISTRATION_INTERVAL": "0.3",
        "PDCTL_OPERATOR_TOKENS": f"alice:{TOKEN}",
        **(extra or {}),
    }
    proc = Process(
        ["serve", "--port", str(port), "--db", str(tmp_path / "pdctl.db")],
        port,
        env=env,
        log_path=tmp_path / f"serve-{time.monotonic_ns()}.log",
    )
    return proc.wait_healthy(30)


@pytest.fixture
def plane(tmp_path, request):
    proc = serve(tmp_path, extra=getattr(request, "param", None))  # param: more environment
    try:
        yield proc
    finally:
        with contextlib.suppress(OSError):
            http_post(
                f"{proc.url}/api/deployments/web/stop",
                {},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            time.sleep(1.0)
        proc.stop()
        reap_instances(tmp_path / "runs")


@pytest.fixture
def browser_page(tmp_path):
    sync_api = _playwright()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        context = browser.new_context(viewport={"width": 1600, "height": 1400})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm on stop/restart
        page.js_errors = errors
        try:
            yield page
        except BaseException:
            raise
        finally:
            if not page.is_closed():
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "last-state.png"), full_page=True)
            context.close()
            browser.close()


def sign_in(page, url: str) -> None:
    page.goto(url + "/")
    assert page.url.endswith("/login")
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(url + "/")


def attr(page, selector: str, name: str) -> str | None:
    return page.get_attribute(selector, name)


def wait_attr(page, selector: str, name: str, predicate, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = attr(page, selector, name)
        if value not in (None, "") and predicate(value):
            return value
        page.wait_for_timeout(250)
    raise TimeoutError(f"{selector}[{name}] = {value!r}")


def test_operator_creates_starts_loads_switches_and_stops_in_the_browser(plane, browser_page):
    page, url = browser_page, plane.url
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    sign_in(page, url)

    # create through the form: a bad field first, its message at the field
    page.click("text=New deployment")
    page.fill("#f-name", "web")
    page.fill("[id='f-groups.0.gpus']", "0,1")
    page.click("button[value=save]")
    error = page.locator("[data-error-for='groups.0.gpus']")
    error.wait_for(timeout=60_000)
    assert "need 1 GPU ids, got 2" in error.inner_text()
    assert page.get_attribute("[id='f-groups.0.gpus']", "aria-invalid") == "true"
    page.fill("[id='f-groups.0.gpus']", "")
    page.fill("[id='f-slo.ttft_ms']", "100")
    page.fill("[id='f-slo.itl_ms']", "10")
    page.click("button[value=save]")
    page.wait_for_url(url + "/deployments/web", timeout=60_000)

    # the live socket is up; start it
    page.wait_for_selector("#live-status[data-live=open]", timeout=60_000)
    page.click("button[data-action=start]")
    page.wait_for_selector("#state-badge [data-state=running]", timeout=60_000)
    page.wait_for_selector("#topology [data-instance=decode-0][data-state=RUNNING]")
    # each process shows the node it runs on: on local processes, this host
    where = page.locator("#topology [data-instance=decode-0] [data-node-address]")
    assert where.get_attribute("data-node-address") == "127.0.0.1"
    assert where.is_visible() and "127.0.0.1" in where.inner_text()

    # load it: the histograms fill and the percentiles move
    page.fill("#load input[name=rate]", "12")
    page.fill("#load input[name=duration]", "40")
    page.click("button[data-action=load]")
    page.wait_for_selector("[data-load-state=running]", timeout=60_000)
    count = float(wait_attr(page, "#chart-ttft", "data-ttft-count", lambda v: float(v) >= 5))
    p50 = float(wait_attr(page, "#chart-ttft", "data-ttft-p50", lambda v: float(v) > 0))
    p99 = float(attr(page, "#chart-ttft", "data-ttft-p99"))
    assert 0 < p50 <= p99
    wait_attr(page, "#chart-itl", "data-itl-count", lambda v: float(v) >= 20)
    buckets = json.loads(attr(page, "#chart-ttft", "data-ttft-buckets"))
    assert sum(c for _, c in buckets) == pytest.approx(
        float(attr(page, "#chart-ttft", "data-ttft-count"))
    )
    seen = {(count, p50, p99)}
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline and len(seen) < 3:
        page.wait_for_timeout(1000)
        seen.add(
            tuple(
                float(attr(page, "#chart-ttft", f"data-ttft-{k}") or 0)
                for k in ("count", "p50", "p99")
            )
        )
    assert len(seen) >= 3, f"the TTFT window did not move: {seen}"
    wait_attr(page, "#chart-slo", "data-points", lambda v: int(v) >= 3)
    assert attr(page, "#live", "data-simulated") == "1"
    assert page.locator(".tag.sim").first.is_visible()
    shot = ARTIFACTS / "deployment-under-load.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"\nscreenshot: {shot}")

    # switch the mode under load; the switch event appears in the live event log
    page.click("button[data-action=switch]")
    page.check("#switch-form input[name=mode][value=write]")
    page.check("#switch-form input[name=strategy][value=hold]")
    page.fill("#switch-reason", "browser test")
    page.click("#switch-form button[type=submit]")
    page.wait_for_selector("#switch-progress [data-switch-state]", timeout=60_000)
    page.wait_for_selector("#switch-progress [data-switch-state=done]", timeout=90_000)
    page.wait_for_selector("#events li[data-kind='switch.done']", timeout=60_000)
    page.wait_for_selector("#topology [data-mode=write]", timeout=60_000)
    shot = ARTIFACTS / "deployment-after-switch.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")

    # stop it
    page.click("button[data-action=stop]")
    page.wait_for_selector("#state-badge [data-state=stopped]", timeout=60_000)
    page.wait_for_selector("#events li[data-kind='deployment.stop']", timeout=60_000)
    assert page.js_errors == [], page.js_errors
    assert os.path.getsize(ARTIFACTS / "deployment-under-load.png") > 10_000


def test_live_socket_reconnects_after_the_control_plane_restarts(tmp_path, browser_page):
    page, first = browser_page, serve(tmp_path)
    try:
        status, _ = http_post(
            f"{first.url}/api/deployments",
            {
                "name": "web",
                "engine": "sim",
                "model": "tiny",
                "topology": "disaggregated",
                "connector": "MoRIIOConnector",
                "prefix_caching": False,
                "groups": [
                    {"name": "prefill", "role": "prefill", "mode": "read"},
                    {"name": "decode", "role": "decode", "mode": "read"},
                ],
            },
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert status == 201
        sign_in(page, first.url)
        page.goto(first.url + "/deployments/web")
        page.wait_for_selector("#live-status[data-live=open]", timeout=60_000)
    finally:
        first.stop()
    page.wait_for_selector("#live-status[data-live=closed]", timeout=60_000)
    assert "reconnecting" in page.inner_text("#live-status")
    # a polled fragment failing says so instead of leaving the page silently stale
    page.wait_for_selector("#notice:not([hidden])", timeout=60_000)
    second = serve(tmp_path, port=first.port)
    try:
        page.wait_for_selector("#live-status[data-live=open]", timeout=60_000)
    finally:
        second.stop()
    assert page.js_errors == [], page.js_errors


def test_a_refused_action_shows_its_error_in_the_notice_and_the_page_stays(plane, browser_page):
    """web/errors.py answers an htmx request with the page's notice (HX-Retarget #notice):
    a 409 from a button and a 404 from a polled fragment both show there, in words."""
    page = browser_page
    status, _ = http_post(f"{plane.url}/api/deployments", WEB_MORIIO, headers=AS_ALICE)
    assert status == 201
    sign_in(page, plane.url)
    page.goto(plane.url + "/deployments/web")
    page.click("button[data-action=stop]")  # never started: a 409
    page.wait_for_selector("#notice[data-error-status='409']:not([hidden])", timeout=60_000)
    assert "has not been started" in page.inner_text("#notice")
    assert page.is_visible("button[data-action=start]")  # the region that asked stays
    # a poll that succeeds meanwhile (the page polls every few seconds) leaves it to be read
    page.evaluate("htmx.ajax('GET', '/deployments/web/topology', {target: '#topology'})")
    assert "has not been started" in page.inner_text("#notice")
    assert page.is_visible("#notice")
    page.evaluate(
        "htmx.ajax('GET', '/deployments/gone/topology', {target: '#flash'})"
    )  # what a deleted deployment's poll gets: a 404 fragment, not JSON
    page.wait_for_selector("#notice[data-error-status='404']", timeout=60_000)
    assert "no deployment named 'gone'" in page.inner_text("#notice")
    assert page.js_errors == [], page.js_errors


@pytest.mark.parametrize("plane", [{"PDCTL_SIM_FAULT_INJECTION": "1"}], indirect=True)
def test_the_pd_banner_names_a_recomputing_decode_live_and_goes_when_it_recovers(
    plane, browser_page, tmp_path
):
    page = browser_page
    status, created = http_post(f"{plane.url}/api/deployments", WEB_MORIIO, headers=AS_ALICE)
    assert status == 201, created
    http_post(f"{plane.url}/api/deployments/web/start", {}, headers=AS_ALICE)
    sign_in(page, plane.url)
    page.goto(plane.url + "/deployments/web")
    page.wait_for_selector("#topology [data-instance=decode-0][data-state=RUNNING]", timeout=60_000)
    _, raw = http_get(f"{plane.url}/api/deployments/web/status", headers=AS_ALICE)
    decode = next(u["url"] for u in json.loads(raw) if u["name"] == "decode-0")
    load = bench_background(
        f"http://127.0.0.1:{created['ports']['proxy']}", tmp_path, "load", 6.0, 400
    )
    try:
        page.wait_for_selector("#live-status[data-live=open]", timeout=60_000)
        page.wait_for_timeout(3000)  # traffic judged healthy first: no banner
        assert attr(page, "#pd-banner", "data-pd") in ("ok", "unknown")
        assert not page.is_visible("#pd-banner")
        wait_attr(page, "#live", "data-kv-source", lambda v: v == "moriio", 15)
        assert not page.is_visible("#kv-source")  # the engine's own figure: not "derived"
        http_post(decode + "/_fault", {"fault": "recompute"})
        wait_attr(page, "#pd-banner", "data-pd", lambda v: v == "recomputing", 15)
        assert page.is_visible("#pd-banner")
        assert "decode-0 recomputes its prompts since" in page.inner_text("#pd-banner")
        page.wait_for_selector("#events li[data-kind='pd.recomputing']", timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / "pd-recomputing.png"), full_page=True)
        clear_fault(decode)
        wait_attr(page, "#pd-banner", "data-pd", lambda v: v == "ok", 25)
        assert not page.is_visible("#pd-banner")
        assert page.js_errors == [], page.js_errors
    finally:
        load.kill()
        load.wait(10)


def test_the_rollout_panel_aborts_a_running_rollout_and_shows_a_refused_undo(
    plane, browser_page, tmp_path
):
    """A revision whose instances take long to start is rolling out; Abort rollout stops it
    and the panel follows its rollback to the end; Undo with no earlier applied revision is
    refused in the panel's notice, in words."""
    page = browser_page
    status, _ = http_post(f"{plane.url}/api/deployments", WEB_MORIIO, headers=AS_ALICE)
    assert status == 201
    http_post(f"{plane.url}/api/deployments/web/start", {}, headers=AS_ALICE)
    sign_in(page, plane.url)
    page.goto(plane.url + "/deployments/web")
    page.wait_for_selector("#rollout .rollout[data-rollout-kind=start]", timeout=60_000)
    page.wait_for_selector("#rollout [data-applied=yes]", timeout=90_000)

    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps({**WEB_MORIIO, "start_time_scale": 1000}))
    applied = pdctl("apply", "-f", str(slow), "--reason", "slow", server=plane.url, token=TOKEN)
    assert applied.returncode == 0, applied.stderr
    assert "rolling out revision 2 by hold" in applied.stdout
    page.wait_for_selector("#rollout li.current", timeout=30_000)
    page.wait_for_selector("button[data-action=abort-rollout]", timeout=30_000)
    rollout_id = attr(page, "#rollout .rollout", "data-rollout-id")
    page.click("button[data-action=abort-rollout]")  # the prompt is answered (empty)
    page.wait_for_selector("#rollout-notice [data-rollout-notice=ok]", timeout=30_000)
    said = page.inner_text("#rollout-notice")
    assert said.startswith(f"Aborting rollout {rollout_id} (apply by hold")
    assert said.endswith("it rolls back to revision 1.")
    page.wait_for_selector(
        "#rollout .rollout[data-rollout-kind=rollback][data-rollout-state=done]", timeout=90_000
    )
    assert f"rolls back rollout {rollout_id}" in page.inner_text("#rollout")
    assert not page.is_visible("button[data-action=abort-rollout]")

    page.click("button[data-action=undo]")  # the confirm is accepted
    page.wait_for_selector("#rollout-notice [data-rollout-notice=refused]", timeout=30_000)
    assert "has no applied revision before 1 to go back to" in page.inner_text("#rollout-notice")
    assert page.js_errors == [], page.js_errors
