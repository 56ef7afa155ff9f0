"""Disturbed windows on running stand-ins under `pdctl serve`: an idle deployment (only
pdctl's own requests reach it) proposes nothing and says why; real load brings a proposal
whose cost is what the rollout would really do (the proxy restarts: connections refused for
its measured restart time); in the window after a restart nothing is proposed again.

About 60 s: a start, an idle window, a load, a restart, a load."""

from __future__ import annotations

import time

import pytest

from harness.stack import bench_background, bench_finished, wait_until
from tests.e2e.rollout.test_proposals import WINDOW, plane, sim, started  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.live_window, pytest.mark.timeout(240)]


def found(plane, name: str) -> dict:  # noqa: F811 (the fixture's name, as a parameter)
    status, body = plane.api("GET", f"/deployments/{name}/proposals?window={WINDOW}")
    assert status == 200, body
    return body


def test_idle_then_load_then_a_restart(plane, tmp_path):  # noqa: F811
    spec = sim(
        "quiet",
        topology="disaggregated",
        connector="NixlConnector",
        groups=[{"name": "prefill", "role": "prefill"}, {"name": "decode", "role": "decode"}],
        time_scale=5,
    )
    url = started(plane, spec)

    # Idle: a live window with no client request proposes nothing, and says why.
    idle = wait_until(
        lambda: (b := found(plane, "quiet"))["live"] and b["not_enough_evidence"] and b, 30, "idle"
    )
    assert "no real traffic: 0 real request(s) in the 10s window" in idle["not_enough_evidence"]
    assert idle["proposals"] == []

    # Real load (4 req/s): light_traffic holds, with the cost of what applying really does.
    load = bench_background(url, tmp_path, "b", 4, 60)
    proposal = wait_until(
        lambda: next(
            (p for p in found(plane, "quiet")["proposals"] if p["rule"] == "light_traffic"), None
        ),
        40,
        "light_traffic under load",
    )
    assert bench_finished(load, tmp_path, "b")["failed"] == 0
    assert proposal["cost"]["strategy"] == "recreate" and proposal["cost"]["proxy_restarts"]
    assert "the proxy refuses new connections" in proposal["disruption"]
    assert "group colocated added (role colocated, count 2, tp 1)" in proposal["changes_text"]
    predicted = proposal["forecast"]["predicted"]
    if proposal["forecast"]["source"] == "planner":  # the advisor's figure, as the page shows it
        assert predicted["baseline"] == predicted["now_measured"] is not None

    # A restart: under load again, the window it ran in (and 10 s after) proposes nothing.
    load = bench_background(url, tmp_path, "c", 4, 60)
    time.sleep(3)
    status, _ = plane.api("POST", "/deployments/quiet/restart")
    assert status == 202
    during = wait_until(
        lambda: (
            "a restart rollout" in (found(plane, "quiet")["not_enough_evidence"] or "")
            and found(plane, "quiet")
        ),
        30,
        "the restart marked",
    )
    assert during["proposals"] == []
    plane.rolled_out("quiet")
    bench_finished(load, tmp_path, "c")
