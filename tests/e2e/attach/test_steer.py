"""Steering an attached deployment (issue 37, deliver 4): a NIXL 1P2D of role-switching
stand-ins and a pdctl proxy, all started by hand, attached by URLs. Under a light load through
that proxy `pdctl move` turns decode-1 into a prefill and the API turns it back, each drained
at the proxy first and recorded as a rollout and a revision, with no request lost; pause,
drain and release reach the proxy. Engines without /v1/pd_role, and a proxy that is not
pdctl's, are refused with the reason and what to do instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.control_plane import ControlPlane
from harness.processes import ADMIN, ADMIN_TOKEN, Process, free_port, http_get, running, sim
from harness.stack import bench_background, bench_finished, instances, nixl_sim, proxy, wait_until
from tests.terminal.verbs_run import pdctl

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]  # 4 stand-ins, a proxy, 10 CLI runs

NAME = "flip"
PROMPTS = 40


def switching_sim(tmp: Path, name: str, role: str) -> Process:
    """A NIXL stand-in that switches roles at runtime (kv_both, serving `role` first)."""
    config = {"kv_connector": "NixlConnector", "kv_role": "kv_both", "pd_role": role}
    return sim(
        tmp,
        name,
        "--served-model-name",
        "tiny",
        "--kv-transfer-config",
        json.dumps(config),
        env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())},
    )


def entry(front: Process, url: str) -> dict[str, Any]:
    return next(i for i in instances(front) if i["url"] == url)


def attach(server: str, name: str, prefill: str, decodes: list[str], *proxy_args: str) -> None:
    args = ["attach", name, "--prefill", prefill, "--model", "tiny"]
    for url in decodes:
        args += ["--decode", url]
    made = pdctl(*args, *proxy_args, server=server, token=None)
    assert made.returncode == 0, made.stderr


def test_an_attached_pair_moves_a_role_under_load_losing_nothing(tmp_path):
    pre = switching_sim(tmp_path, "prefill", "prefill")
    dec0 = switching_sim(tmp_path, "decode0", "decode")
    dec1 = switching_sim(tmp_path, "decode1", "decode")
    old = nixl_sim(tmp_path, "old", "kv_consumer", "--served-model-name", "tiny")  # vLLM 0.32
    plane = ControlPlane(tmp_path, {"PDCTL_ATTACH_ADMIN_TOKEN": ADMIN_TOKEN})
    with running(pre, dec0, dec1, old):
        route = ("--prefill", pre.url, "--decode", dec0.url, "--decode", dec1.url)
        front = proxy(tmp_path, "proxy", *route)
        with running(front):
            plane.start()
            try:
                server = plane.server.url
                ours = ("--proxy", front.url, "--proxy-kind", "pdctl")
                attach(server, NAME, pre.url, [dec0.url, dec1.url], *ours)
                attach(server, "old", pre.url, [old.url, dec0.url], *ours)
                routed = ("--proxy", front.url, "--proxy-kind", "vllm-router")
                attach(server, "routed", pre.url, [dec0.url, dec1.url], *routed)
                _refusals(server, plane, old)

                load = bench_background(front.url, tmp_path, "load", 4, PROMPTS)
                # moved while requests are in flight, not before the load starts
                wait_until(
                    lambda: any(i["outstanding_requests"] for i in instances(front)), 30, "load"
                )
                moved = pdctl(
                    "move", NAME, "decode-1", "--role", "prefill", "--reason", "prefill-bound",
                    "--drain-timeout", "60", "--json", server=server, token=None,
                )  # fmt: skip
                assert moved.returncode == 0, moved.stderr
                there = json.loads(moved.stdout)
                assert (there["from"], there["to"], there["epoch"]) == ("decode", "prefill", 1)
                assert "warning" not in there
                now = entry(front, dec1.url)
                assert (now["role"], now["draining"]) == ("prefill", False), now
                assert json.loads(http_get(dec1.url + "/v1/pd_role")[1])["role"] == "prefill"
                _, units = plane.api("GET", f"/deployments/{NAME}/status")
                rows = {u["name"]: u["role"] for u in units}
                assert rows["decode-1"] == "prefill", rows

                body = {"instance": "decode-1", "role": "decode", "reason": "back"}
                status, back = plane.api("POST", f"/deployments/{NAME}/role-moves", body)
                assert status == 200, back
                assert back["epoch"] == 2 and back["revision"] == there["revision"] + 1
                result = bench_finished(load, tmp_path, "load")
                print("attached moves:", there["seconds"], back["seconds"], "s; bench", result)
                assert result["completed"] == PROMPTS and result["failed"] == 0, result

                serves = ((there["revision"], {"decode-1": "prefill"}), (back["revision"], {}))
                for number, serving in serves:
                    status, rev = plane.api("GET", f"/deployments/{NAME}/revisions/{number}")
                    assert status == 200 and rev["state"] == "applied", rev
                    assert rev["spec"]["role_switch"]["serving"] == serving
                _, rollouts = plane.api("GET", f"/deployments/{NAME}/rollouts")
                assert [(r["kind"], r["state"]) for r in rollouts[:2]] == [
                    ("role_move", "done")
                ] * 2
                _, events = plane.api("GET", f"/events?deployment={NAME}&kind=deployment.role_move")
                assert len(events) == 2, events

                _steer_at_the_proxy(server, plane, front, dec0.url)
            finally:
                plane.close()


def _refusals(server: str, plane: ControlPlane, old: Process) -> None:
    """Engines without /v1/pd_role, and a proxy that is not pdctl's: refused, saying why."""
    said = pdctl(
        "move", "old", "decode-0", "--role", "prefill", "--reason", "t", server=server, token=None
    )
    assert said.returncode == 5, said.stderr
    assert "do not support role moves" in said.stderr and "404" in said.stderr, said.stderr
    assert f"vllm serve tiny --port {old.port} --host 127.0.0.1" in said.stderr, said.stderr
    assert '"kv_role":"kv_both"' in said.stderr and "--prefill" in said.stderr, said.stderr
    said = pdctl(
        "move", "routed", "decode-1", "--role", "prefill", "--reason", "t",
        server=server, token=None,
    )  # fmt: skip
    assert said.returncode == 5 and "--force" in said.stderr, said.stderr
    said = pdctl("drain", "routed", "decode-0", server=server, token=None)
    assert said.returncode == 5 and "vllm-router" in said.stderr, said.stderr
    _, rollouts = plane.api("GET", "/deployments/old/rollouts")
    assert rollouts == []  # nothing begun


def _steer_at_the_proxy(server: str, plane: ControlPlane, front: Process, url: str) -> None:
    drained = pdctl("drain", NAME, "decode-0", "--reason", "t", server=server, token=None)
    assert drained.returncode == 0, drained.stderr
    assert entry(front, url)["draining"] is True
    undrained = pdctl("undrain", NAME, "decode-0", server=server, token=None)
    assert undrained.returncode == 0 and entry(front, url)["draining"] is False
    paused = pdctl("pause", NAME, "--json", server=server, token=None)
    assert paused.returncode == 0, paused.stderr
    groups = json.loads(http_get(front.url + "/admin/groups", headers=ADMIN)[1])["groups"]
    assert groups and all(g["paused"] for g in groups), groups
    released = pdctl("release", NAME, server=server, token=None)
    assert released.returncode == 0, released.stderr
    groups = json.loads(http_get(front.url + "/admin/groups", headers=ADMIN)[1])["groups"]
    assert not any(g["paused"] for g in groups), groups
    _, events = plane.api("GET", f"/events?deployment={NAME}")
    kinds = {e["kind"] for e in events}
    assert {"proxy.drain", "proxy.undrain", "proxy.pause", "proxy.release"} <= kinds
