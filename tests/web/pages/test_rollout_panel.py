"""The deployment page's Rollout panel: the running (else last) rollout with its steps and each
process's truth, and its two buttons, Abort rollout and Undo, answered with the panel
re-rendered and a notice, refusals too (409, 404, 422, a viewer's 403, a cross-site post).
The abort and the undo run against real stand-in engines."""

from __future__ import annotations

import html as html_lib
import re
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from harness.processes import reap_instances
from tests.specs import nixl_1p1d
from tests.web.conftest import AS_OPERATOR, AS_VIEWER, MakeClient

HX = {"HX-Request": "true"}
SLOW = 1000.0  # start_time_scale: the stand-in opens its port only after a long while


def notice(html: str) -> tuple[str, str]:
    """The panel's notice: ("ok" or "refused", its text)."""
    found = re.search(r'data-rollout-notice="(\w+)">([^<]*)<', html)
    assert found, html[:400]
    return found.group(1), html_lib.unescape(found.group(2))


def rollout_of(client: TestClient) -> dict:
    return client.get("/api/deployments/pd/rollout").json()


def settled(client: TestClient) -> bool:
    """No rollout runs and the desired revision is applied."""
    body = rollout_of(client)
    return body["applied"] and body["rollout"]["ended_at"] is not None


def wait_for(predicate, timeout: float = 60.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.1)
    raise TimeoutError(f"not within {timeout} s: {what}")


@pytest.fixture
def stored(make_client: MakeClient) -> TestClient:
    client = make_client()
    assert client.post("/api/deployments", json=nixl_1p1d()).status_code == 201
    return client


@pytest.fixture
def reaped(tmp_path) -> Iterator[None]:
    """Set up before the app (make_client), so torn down after it is closed: then kill what
    its supervisor left under the run dir (an aborted rollout's processes included)."""
    yield
    reap_instances(tmp_path / "runs-0")


@pytest.fixture
def running(reaped, make_client: MakeClient) -> Iterator[TestClient]:
    """ "pd" started on real stand-ins, its start rollout over, every process RUNNING."""
    client = make_client()
    try:
        assert client.post("/api/deployments", json=nixl_1p1d()).status_code == 201
        assert client.post("/api/deployments/pd/start").status_code == 202
        wait_for(
            lambda: (
                (body := rollout_of(client))["rollout"]["state"] != "running"
                and all(i["state"] == "RUNNING" for i in body["instances"])
            ),
            what="pd started",
        )
        yield client
    finally:
        client.post("/api/deployments/pd/stop")  # 409 while a rollout runs: reaped then


def test_the_page_shows_the_panel_and_the_undo_picker(stored) -> None:
    stored.put("/api/deployments/pd?reason=shorter", json=nixl_1p1d(max_model_len=1024))
    page = stored.get("/deployments/pd").text
    assert 'id="rollout" hx-get="/deployments/pd/rollout" hx-trigger="every 2s' in page
    assert "No rollout yet." in page and 'data-applied="no"' in page and "not running" in page
    assert 'data-action="abort-rollout"' not in page  # nothing runs to abort
    picker = page.split("data-undo-picker>", 1)[1].split("</select>", 1)[0]
    assert re.findall(r'<option value="(\d*)">', picker) == ["", "1"]
    assert "revision 1 (superseded)" in picker  # never started, then edited
    fragment = stored.get("/deployments/pd/rollout", headers=HX).text
    assert "<html" not in fragment and "No rollout yet." in fragment


def test_refusals_come_back_as_the_panels_notice(stored, make_client) -> None:
    nothing = stored.post("/deployments/pd/rollout/abort", headers=HX)
    assert nothing.status_code == 409
    assert notice(nothing.text) == (
        "refused",
        "no rollout of 'pd' is in progress: nothing to abort",
    )
    assert 'hx-swap-oob="innerHTML:#rollout"' in nothing.text  # the panel, re-rendered
    assert "hx-retarget" not in nothing.headers
    stopped = stored.post("/deployments/pd/rollout/undo", headers=HX, data={"reason": "x"})
    assert stopped.status_code == 409
    assert notice(stopped.text)[1] == "deployment 'pd' is not running: edit it, or start it"
    bad = stored.post("/deployments/pd/rollout/undo", headers=HX, data={"to_revision": "two"})
    assert bad.status_code == 422
    assert notice(bad.text)[1].startswith("to_revision: Input should be a valid integer")
    strategy = stored.post("/deployments/pd/rollout/undo", headers=HX, data={"strategy": "fast"})
    assert strategy.status_code == 422 and notice(strategy.text)[1].startswith("strategy: ")
    missing = stored.post("/deployments/nope/rollout/abort", headers=HX)
    assert missing.status_code == 404 and missing.headers["hx-retarget"] == "#notice"

    secured = make_client(operator_tokens=["alice:op-secret"], viewer_tokens=["bob:view-secret"])
    secured.post("/api/deployments", json=nixl_1p1d(), headers=AS_OPERATOR)
    viewer = secured.post("/deployments/pd/rollout/abort", headers={**HX, **AS_VIEWER})
    assert viewer.status_code == 403
    assert notice(viewer.text) == (
        "refused",
        "viewer:bob may only read; changes need an operator token",
    )
    page = secured.get("/deployments/pd", headers=AS_VIEWER).text
    assert re.search(r'<button disabled data-action="undo">Undo</button>', page)
    cross = secured.post(
        "/deployments/pd/rollout/undo",
        headers={**HX, **AS_OPERATOR, "Sec-Fetch-Site": "cross-site"},
    )
    assert cross.status_code == 403 and "ross-origin" in cross.text


def test_abort_rolls_back_and_undo_goes_back_from_the_page(running) -> None:
    client = running
    slow = nixl_1p1d(start_time_scale=SLOW)
    put = client.put("/api/deployments/pd?reason=slow", json=slow)
    assert put.status_code == 200 and put.json()["rollout"]["state"] == "running"
    rid = put.json()["rollout"]["id"]
    wait_for(lambda: "wait_ready" in (rollout_of(client)["rollout"]["current"] or ""))
    panel = client.get("/deployments/pd/rollout", headers=HX).text
    assert f'data-rollout-id="{rid}" data-rollout-state="running"' in panel
    assert 'data-action="abort-rollout"' in panel and 'data-step-state="running"' in panel
    assert 'data-truth="prefill-0"' in panel and 'data-truth="decode-0"' in panel

    aborted = client.post("/deployments/pd/rollout/abort", headers={**HX, "HX-Prompt": "too slow"})
    assert aborted.status_code == 200 and aborted.headers["hx-trigger"] == "pd-refresh"
    state, said = notice(aborted.text)
    assert state == "ok" and said.startswith(f"Aborting rollout {rid} (apply by ")
    assert said.endswith("it rolls back to revision 1.")
    ended = wait_for(
        lambda: (r := client.get(f"/api/deployments/pd/rollouts/{rid}").json())["ended_at"] and r,
        what="the rollback to end",
    )
    assert ended["state"] == "aborted" and ended["aborted_by"] == "anonymous (too slow)"
    back = client.get(f"/api/deployments/pd/rollouts/{ended['rolled_back_by']}").json()
    assert (back["kind"], back["state"]) == ("rollback", "done")
    panel = client.get("/deployments/pd/rollout", headers=HX).text
    assert 'data-action="abort-rollout"' not in panel

    missing = client.post("/deployments/pd/rollout/undo", headers=HX, data={"to_revision": "99"})
    assert missing.status_code == 404
    assert notice(missing.text)[1] == "deployment 'pd' has no revision 99 (current: 1)"

    client.put("/api/deployments/pd?reason=shorter", json=nixl_1p1d(max_model_len=1024))
    wait_for(lambda: settled(client), what="revision 3 applied")
    undone = client.post(
        "/deployments/pd/rollout/undo", headers=HX, data={"to_revision": "", "reason": "back"}
    )
    assert undone.status_code == 200, undone.text
    state, said = notice(undone.text)
    assert state == "ok" and said.startswith("Undo stored revision 4: rollout ")
    wait_for(lambda: settled(client), what="revision 4 applied")
    current = client.get("/api/deployments/pd").json()
    assert (current["revision"], current["spec"]["max_model_len"]) == (4, None)
