"""Real vLLM (CPU), NixlConnector, one prefill and one decode through pdctl: the prefill is
restarted (its process group SIGKILLed, the supervisor starts it again) while requests flow,
and afterwards the decode still serves the colocated reference's greedy answers: a prefill
restart wedges no decode (a decode whose transfers keep failing through a stale agent is
restarted by the controller, controller/supervise/stale_peers.py). One decode, not two: a
second shared the same core and added minutes to CI without a case of its own (the proxy's
retry onto another decode is tested in tests/connector/test_retries.py, and the 2P2D chaos
campaign kills instances under load with spares)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import openai
import pytest

from harness.processes import http_get
from tests.vllm import harness
from tests.vllm.conftest import REFERENCE_REQUESTS, client, deployed, greedy

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1500)]

# The load's client outwaits the proxy's own bounds (its prefill and decode leg timeouts, 120 s
# each by default), so that every failure is the proxy's answer, never the client giving up: a
# decode whose KV pull from the killed prefill never ends is answered at the decode timeout.
LOAD_TIMEOUT_S = 300.0


def spec(setup) -> dict:
    return harness.pd_spec("pd-restart", setup.model, setup.marker, "NixlConnector")


def failed_in_proxy(live: harness.Live) -> list[dict]:
    """The proxy's own record of the requests it failed: each attempt's pair and error."""
    status, raw = http_get(
        live.proxy_url + "/admin/requests?limit=1000", 10, live.plane.admin_headers(live.name)
    )
    if status != 200:
        return [{"the proxy's request log": f"HTTP {status}"}]
    return [r for r in json.loads(raw)["requests"] if r.get("outcome") != "ok"][-5:]


def recovered(outcomes: list[str], stamps: list[float], back: float, run: int = 3) -> bool:
    """`run` requests in a row, each sent after `back`, were served."""
    after = [o == "ok" for o, t in zip(list(outcomes), list(stamps), strict=False) if t >= back]
    return any(all(after[i : i + run]) for i in range(len(after) - run + 1))


def test_a_restarted_prefill_leaves_every_decode_serving_correct_answers(
    plane, vllm_setup, reference
):
    with deployed(plane, spec(vllm_setup), vllm_setup) as live:
        api = client(live).with_options(timeout=LOAD_TIMEOUT_S)
        stop = threading.Event()
        outcomes: list[str] = []
        stamps: list[float] = []  # when each request that has an outcome was sent
        took: list[float] = []  # and how long its answer took

        def load() -> None:
            seed = 100
            while not stop.is_set():
                seed += 1
                sent = time.monotonic()
                try:
                    greedy(api, vllm_setup.model, "completion", seed)
                    outcome = "ok"
                except openai.APIError as exc:  # 503 while no prefill runs, 502 naming a leg
                    outcome = f"{type(exc).__name__}: {exc}"[:200]
                    time.sleep(0.5)  # a client backing off, not a 503 loop
                took.append(time.monotonic() - sent)
                stamps.append(sent)
                outcomes.append(outcome)

        worker = threading.Thread(target=load, daemon=True)
        worker.start()
        try:
            time.sleep(5)
            before = plane.status(live.name)["prefill-0"]["pid"]
            # the engine's whole process group (the API server and its EngineCore), as a
            # crash of the engine takes both: a lone API server's orphaned EngineCore would
            # keep the NIXL side-channel port and the new prefill could not start
            os.killpg(os.getpgid(before), signal.SIGKILL)
            killed = time.monotonic()
            deadline = time.monotonic() + harness.START_TIMEOUT_S
            while time.monotonic() < deadline:
                units = plane.status(live.name)
                if units["prefill-0"]["pid"] not in (None, before) and all(
                    u["state"] == "RUNNING" for u in units.values()
                ):
                    break
                time.sleep(1)
            else:
                pytest.fail(f"prefill-0 not back: {plane.status(live.name)}")
            back = time.monotonic()
            # Requests sent through the new prefill until three in a row
            # were served (a request in flight at the restart, or one a decode being restarted
            # for its stale agent refused, may fail): bounded, a CPU pair serves few a second.
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and not recovered(outcomes, stamps, back):
                time.sleep(1)
        finally:
            stop.set()
            worker.join(timeout=LOAD_TIMEOUT_S + 30)
        errors = [o for o in outcomes if o != "ok"]
        phases = {"before": (0, killed), "down": (killed, back), "back": (back, float("inf"))}
        counts = {
            phase: [o == "ok" for o, t in zip(outcomes, stamps, strict=True) if lo <= t < hi]
            for phase, (lo, hi) in phases.items()
        }
        print(
            "load around the restart (ok/all): "
            + ", ".join(f"{p} {sum(c)}/{len(c)}" for p, c in counts.items())
            + f"; prefill back {back - killed:.0f} s after the kill; last errors: {errors[-3:]}"
        )
        # A decode the controller restarts for its stale agent may still be starting: the
        # reference answers are asked once every process runs and the proxy serves again.
        settled = time.monotonic() + harness.START_TIMEOUT_S
        harness.wait_running(plane, live.name, settled, restarts_fail=False)
        harness.wait_serving(live, str(vllm_setup.model), settled, restarts_fail=False)
        # After the restart: every reference answer (a fresh client: the load's kept-alive
        # connections may have been closed meanwhile).
        api = client(live)
        for key in REFERENCE_REQUESTS:
            assert greedy(api, vllm_setup.model, *key).text == reference[key].text
        # Once the prefill is back, the load recovers: three requests sent after it in a row
        # were served.
        assert recovered(outcomes, stamps, back), counts["back"]
        unclear = [
            f"sent {t - killed:+.1f} s from the kill, answered in {d:.1f} s: {o}"
            for o, t, d in zip(outcomes, stamps, took, strict=False)
            if o != "ok" and "leg to" not in o and "no instance" not in o
        ]
        assert unclear == [], (len(errors), len(outcomes), unclear[:5], failed_in_proxy(live))
        _, events = plane.api("GET", f"/events?deployment={live.name}&kind=stale_peer")
        print(f"load: {len(outcomes)} requests, {len(errors)} failed; stale_peer: {events}")
