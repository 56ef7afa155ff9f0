"""`pdctl serve` runs the P:D ratio autopilot on a 2P2D role-switch stand-in deployment: a
load that misses its TTFT target while ITL is fine (a TTFT line no request meets, an ITL line
every request meets) makes it move one decode to prefill by runtime role switch, with no
request lost, an `autopilot.move` event with the numbers and a revision; in dry-run it moves
nothing and records `autopilot.dry_run`."""

from __future__ import annotations

import contextlib
import html

import pytest

from harness.control_plane import ControlPlane
from harness.demo_run import frame
from harness.processes import http_get
from harness.sim_specs import qwen3_2p2d
from harness.stack import bench_background, bench_finished, wait_until

pytestmark = pytest.mark.e2e


def spec(name: str, dry_run: bool) -> dict:
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [
            {"name": "prefill", "role": "prefill", "count": 2},
            {"name": "decode", "role": "decode", "count": 2},
        ],
        "proxy": {"hold_queue": 256, "hold_deadline_s": 60},
        # TTFT-bound by construction: no first token within 0.1 ms, every gap within 10 s
        "slo": {"ttft_ms": 0.1, "itl_ms": 10000},
        "role_switch": {},
        "autopilot": {"window_s": 5, "cooldown_s": 3600, "dry_run": dry_run},
    }


@pytest.fixture
def plane(tmp_path):
    plane = ControlPlane(tmp_path).start()
    try:
        yield plane
    finally:
        status, _ = plane.api("POST", "/deployments/auto/stop")
        if status == 202:
            with contextlib.suppress(TimeoutError):
                plane.wait(
                    "auto",
                    lambda us: all(u["state"] in ("STOPPED", "EXITED") for u in us.values()),
                    30,
                )
        plane.close()


def events(plane, kind: str) -> list[dict]:
    status, found = plane.api("GET", f"/events?deployment=auto&kind={kind}")
    assert status == 200, found
    return found


def started(plane, dry_run: bool) -> int:
    status, created = plane.api("POST", "/deployments", spec("auto", dry_run))
    assert status == 201, created
    plane.api("POST", "/deployments/auto/start")
    plane.running("auto")
    return created["ports"]["proxy"]


def test_a_ttft_bound_load_moves_one_decode_to_prefill_with_nothing_lost(plane, tmp_path):
    proxy_port = started(plane, dry_run=False)
    load = bench_background(f"http://127.0.0.1:{proxy_port}", tmp_path, "auto", 8, 240)
    moved = wait_until(lambda: events(plane, "autopilot.move"), 60, "an autopilot move")
    result = bench_finished(load, tmp_path, "auto")
    assert result["completed"] == 240 and result["failed"] == 0, result

    detail = moved[0]["detail"]
    assert (detail["bound"], detail["source"], detail["target"]) == ("ttft", "decode", "prefill")
    numbers = detail["numbers"]
    assert numbers["ttft_bound_samples"] * 2 >= numbers["samples"] >= 4 and numbers["slo_ttft_s"]
    assert "TTFT-bound" in moved[0]["message"]
    status, revision = plane.api("GET", f"/deployments/auto/revisions/{detail['revision']}")
    assert status == 200 and revision["state"] == "applied", revision
    assert revision["spec"]["role_switch"]["serving"] == {detail["instance"]: "prefill"}
    assert revision["actor"] == "autopilot"
    assert len(events(plane, "autopilot.move")) == 1  # the cooldown holds the next
    status, shown = plane.api("GET", "/deployments/auto/autopilot")
    assert status == 200 and shown["mode"] == "on", shown
    assert shown["last_move"]["instance"] == detail["instance"]
    roles = {n: u["role"] for n, u in plane.status("auto").items() if n != "proxy"}
    assert sorted(roles.values()).count("prefill") == 3, roles


def test_dry_run_records_what_it_would_do_and_changes_nothing(plane, tmp_path):
    proxy_port = started(plane, dry_run=True)
    _, before = plane.api("GET", "/deployments/auto")
    load = bench_background(f"http://127.0.0.1:{proxy_port}", tmp_path, "auto", 8, 120)
    would = wait_until(lambda: events(plane, "autopilot.dry_run"), 60, "a dry-run decision")
    result = bench_finished(load, tmp_path, "auto")
    assert result["failed"] == 0, result
    assert would[0]["detail"]["source"] == "decode" and would[0]["detail"]["dry_run"]
    assert "would move" in would[0]["message"]
    _, after = plane.api("GET", "/deployments/auto")
    assert after["revision"] == before["revision"]
    assert events(plane, "autopilot.move") == [] and events(plane, "deployment.role_move") == []
    status, shown = plane.api("GET", "/deployments/auto/autopilot")
    assert status == 200 and shown["mode"] == "dry-run" and shown["last_move"]["dry_run"], shown
    status, page = http_get(f"{plane.proc.url}/deployments/auto")
    assert status == 200 and b'id="autopilot"' in page
    status, line = http_get(f"{plane.proc.url}/deployments/auto/autopilot")
    assert status == 200 and line.startswith(b"autopilot: dry-run, would move decode-"), line
    # the live frames carry it too (the dashboard's line, `pdctl top`)
    live = frame(plane.proc.url, "auto", "10s")["autopilot"]
    assert live["mode"] == "dry-run" and live["line"] == html.unescape(line.decode()), live


@pytest.mark.live_window
def test_arrivals_that_outrun_the_prefills_move_a_decode_before_any_target_is_missed(
    plane, tmp_path
):
    """Qwen3-235B on MI300X stand-ins (x4 slower): 6,000-token prompts at 2 req/s need ~3.2
    prefills where 2 serve. No target is missed yet (the lines are far), so only the arrivals'
    mix can say so: the autopilot moves one decode to prefill within its first window."""
    body = {
        **spec("auto", dry_run=False),
        **qwen3_2p2d("auto", time_scale=4.0),
        "slo": {"ttft_ms": 600000, "itl_ms": 600000},
        "autopilot": {"window_s": 10, "cooldown_s": 3600},
    }
    status, created = plane.api("POST", "/deployments", body)
    assert status == 201, created
    plane.api("POST", "/deployments/auto/start")
    plane.running("auto")
    shape = ("--model", "Qwen/Qwen3-235B-A22B-FP8", "--input-len", "6000", "--output-len", "8")
    url = f"http://127.0.0.1:{created['ports']['proxy']}"
    load = bench_background(url, tmp_path, "auto", 2, 30, *shape)
    moved = wait_until(lambda: events(plane, "autopilot.move"), 60, "an autopilot move")
    result = bench_finished(load, tmp_path, "auto")
    assert result["completed"] == 30 and result["failed"] == 0, result

    detail = moved[0]["detail"]
    assert (detail["bound"], detail["source"], detail["target"]) == ("ttft", "decode", "prefill")
    assert "the arrivals need" in detail["why"] and "2 and 2 serve" in detail["why"]
    demand = detail["numbers"]["demand"]
    assert 1.2 < demand["prefill_share"] < 2.5, demand  # ~1.6 by the model
    assert demand["decode_share"] < 0.2 and "qwen3-235b-a22b-fp8 on mi300x" in demand["capacity"]
    # No target missed (the bench failed none); a window in which the first 6,000-token
    # prompts had arrived and none had finished yet reads 0% (issue 35), so the mean may dip.
    attained = detail["numbers"]["slo_attainment_mean"]
    assert attained is None or attained > 0.5, attained
    status, shown = plane.api("GET", "/deployments/auto/autopilot")
    assert status == 200 and "timing model" in shown["capacity"], shown
