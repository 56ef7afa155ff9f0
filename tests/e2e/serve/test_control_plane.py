"""The control plane with real processes: `pdctl serve` starts a stand-in MoRIIO deployment,
keeps it alive through kill -9, switches its mode under load without losing a request, and
adopts it after a crash of its own."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.control_plane import ControlPlane
from harness.processes import http_post
from harness.stack import bench_background, bench_finished

pytestmark = pytest.mark.e2e


def moriio(name: str, pairs: int = 1) -> dict:
    groups = []
    for i in range(pairs):
        suffix = "" if pairs == 1 else f"-{i}"
        groups += [
            {"name": f"prefill{suffix}", "role": "prefill", "mode": "read"},
            {"name": f"decode{suffix}", "role": "decode", "mode": "read"},
        ]
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "prefix_caching": False,
        "groups": groups,
        "proxy": {"hold_queue": 256, "hold_deadline_s": 60},
    }


@pytest.fixture
def plane(tmp_path):
    plane = ControlPlane(tmp_path).start()
    try:
        yield plane
    finally:
        for name in ("mori", "two"):
            status, _ = plane.api("POST", f"/deployments/{name}/stop")
            if status == 202:
                with contextlib.suppress(TimeoutError):
                    plane.wait(
                        name,
                        lambda us: all(u["state"] in ("STOPPED", "EXITED") for u in us.values()),
                        30,
                    )
        plane.close()


def complete(proxy_port: int, n: int = 8) -> dict:
    status, body = http_post(
        f"http://127.0.0.1:{proxy_port}/v1/completions",
        {"model": "tiny", "prompt": "one two three", "max_tokens": n, "ignore_eos": True},
    )
    assert status == 200, body
    return body


def bench(proxy_port: int, tmp: Path, name: str, rate: float, prompts: int) -> subprocess.Popen:
    return bench_background(f"http://127.0.0.1:{proxy_port}", tmp, name, rate, prompts)


bench_result = bench_finished


def test_start_kill_restart_switch_and_adopt(plane, tmp_path):
    status, created = plane.api("POST", "/deployments", moriio("mori"))
    assert status == 201, created
    proxy_port = created["ports"]["proxy"]
    status, _ = plane.api("POST", "/deployments/mori/start")
    assert status == 202
    units = plane.running("mori")
    assert complete(proxy_port)["usage"]["completion_tokens"] == 8

    # kill -9 the decode: the supervisor brings it back
    os.kill(units["decode-0"]["pid"], signal.SIGKILL)
    units = plane.wait(
        "mori", lambda us: us["decode-0"]["restarts"] >= 1 and us["decode-0"]["state"] == "RUNNING"
    )
    assert complete(proxy_port)["usage"]["completion_tokens"] == 8

    # read -> write by hold, under load: nothing lost, nothing rejected
    load = bench(proxy_port, tmp_path, "hold", rate=10, prompts=60)
    time.sleep(1.0)
    record = plane.switch("mori", "write", "hold")
    assert record["state"] == "done", record
    result = bench_result(load, tmp_path, "hold")
    assert result["completed"] == 60 and result["failed"] == 0
    assert record["held_s"] is not None and record["rejected"] == 0
    _, current = plane.api("GET", "/deployments/mori")
    assert {g["mode"] for g in current["spec"]["groups"]} == {"write"}

    # write -> read by keep-serving, under load
    load = bench(proxy_port, tmp_path, "keep", rate=10, prompts=60)
    time.sleep(1.0)
    record = plane.switch("mori", "read", "keep-serving")
    assert record["state"] == "done", record
    result = bench_result(load, tmp_path, "keep")
    assert result["completed"] == 60 and result["failed"] == 0
    assert record["degraded_s"] is not None

    _, events = plane.api("GET", "/events?deployment=mori&kind=switch.done")
    assert len(events) == 2 and "held" in events[-1]["message"]
    # whole requests on the decode during keep-serving are by design: the PD check is quiet
    _, events = plane.api("GET", "/events?deployment=mori&limit=100")
    assert not [e for e in events if e["kind"].startswith("pd.")], events

    # kill -9 the control plane: a new one adopts the same processes
    pids = {n: u["pid"] for n, u in plane.status("mori").items()}
    plane.proc.kill()
    plane.start()
    adopted = plane.running("mori")
    assert {n: u["pid"] for n, u in adopted.items()} == pids
    assert complete(proxy_port)["usage"]["completion_tokens"] == 8


def test_two_pairs_roll_with_nothing_held(plane, tmp_path):
    status, created = plane.api("POST", "/deployments", moriio("two", pairs=2))
    assert status == 201, created
    proxy_port = created["ports"]["proxy"]
    plane.api("POST", "/deployments/two/start")
    plane.running("two")
    load = bench(proxy_port, tmp_path, "roll", rate=10, prompts=60)
    time.sleep(1.0)
    record = plane.switch("two", "write", "roll")
    assert record["state"] == "done", record
    result = bench_result(load, tmp_path, "roll")
    assert result["completed"] == 60 and result["failed"] == 0
    assert record["held_s"] is None and record["rejected"] == 0


def test_switch_refusals_are_409_with_the_reason(plane):
    plane.api("POST", "/deployments", moriio("mori"))
    status, body = plane.api(
        "POST", "/deployments/mori/switch", {"mode": "write", "strategy": "hold", "reason": "x"}
    )
    assert status == 409 and "not running" in body["detail"]
    plane.api("POST", "/deployments/mori/start")
    plane.running("mori")
    status, body = plane.api(
        "POST", "/deployments/mori/switch", {"mode": "read", "strategy": "hold", "reason": "x"}
    )
    assert status == 409 and "already runs in read" in body["detail"]
    status, body = plane.api(
        "POST", "/deployments/mori/switch", {"mode": "write", "strategy": "roll", "reason": "x"}
    )
    assert status == 409 and "two or more of each" in body["detail"]
    status, body = plane.api(
        "POST", "/deployments/mori/switch", {"mode": "write", "strategy": "sideways", "reason": "x"}
    )
    assert status == 422


def test_a_switch_cut_short_by_a_control_plane_kill_is_shown_and_settled_after_restart(plane):
    status, created = plane.api("POST", "/deployments", moriio("mori"))
    assert status == 201, created
    proxy_port = created["ports"]["proxy"]
    plane.api("POST", "/deployments/mori/start")
    plane.running("mori")
    status, record = plane.api(
        "POST", "/deployments/mori/switch", {"mode": "write", "strategy": "hold", "reason": "x"}
    )
    assert status == 202 and record["revision_state"] == "in_progress", record
    # desired state first: the target revision is the deployment's, in progress, at once
    _, current = plane.api("GET", "/deployments/mori")
    assert current["revision"] == record["revision"] and current["state"] == "in_progress"
    deadline = time.monotonic() + 30
    while not str(record.get("current")).startswith(("apply", "wait_ready")):
        assert time.monotonic() < deadline and record["state"] == "running", record
        _, record = plane.api("GET", f"/deployments/mori/switches/{record['id']}")
    plane.proc.kill()  # mid-restart, with the read group held in the proxy
    plane.start()

    _, listed = plane.api("GET", "/deployments/mori/switches")
    assert [r["id"] for r in listed] == [record["id"]]  # the same switch, found again
    deadline = time.monotonic() + 60
    while True:
        _, after = plane.api("GET", f"/deployments/mori/switches/{record['id']}")
        if after["state"] != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    # Taken over by the new control plane: the same rollout, resumed, on to its revision.
    assert after["resumed"] == 1 and after["state"] == "done", json.dumps([after])
    assert after["revision_state"] == "applied", json.dumps([after, plane.status("mori")])
    _, current = plane.api("GET", "/deployments/mori")
    assert current["state"] == "applied"
    assert {g["mode"] for g in current["spec"]["groups"]} == {"write"}
    assert complete(proxy_port)["usage"]["completion_tokens"] == 8  # nothing held any more
