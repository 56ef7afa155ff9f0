"""Under `pdctl serve`, a MoRIIO deployment's proxy accepts only the registrations the
controller launched: a rogue instance, the real decode claiming the other mode, and a
malformed message are refused and reported as events, and every request stays on the real
pair; a mode switch the controller runs still moves the instances."""

from __future__ import annotations

import contextlib
import json

import msgpack
import pytest
import zmq

from benchmarks.chaos.load import fault_on
from harness.control_plane import ControlPlane
from harness.processes import free_port, http_get, metric_value, running, sim
from harness.stack import wait_until
from tests.e2e.serve.test_control_plane import complete, moriio

pytestmark = pytest.mark.e2e


def send(port: int, payload: bytes) -> None:
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 1000)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    dealer.send(payload)
    dealer.close(linger=1000)
    ctx.term()


def refused_events(plane: ControlPlane) -> list[str]:
    _, events = plane.api("GET", "/events?deployment=mori&kind=registry.refused")
    return [e["message"] for e in events]


def test_only_launched_registrations_are_routed_to(tmp_path):
    plane = ControlPlane(tmp_path)
    plane.env |= {"PDCTL_SIM_FAULT_INJECTION": "1"}  # the decode will claim the other mode
    plane.start()
    try:
        status, created = plane.api("POST", "/deployments", moriio("mori"))
        assert status == 201, created
        proxy_port, registry = created["ports"]["proxy"], created["ports"]["registry"]
        plane.api("POST", "/deployments/mori/start")
        units = plane.running("mori")
        proxy_url = f"http://127.0.0.1:{proxy_port}"
        headers = plane.admin_headers("mori")

        port = free_port()
        config = {
            "kv_connector": "MoRIIOConnector",
            "kv_role": "kv_consumer",
            "kv_connector_extra_config": {
                "proxy_ip": "127.0.0.1",
                "proxy_ping_port": str(registry),
                "http_port": str(port),
                "handshake_port": str(free_port()),
                "notify_port": str(free_port()),
                "read_mode": "true",
            },
        }
        rogue = sim(
            tmp_path,
            "rogue",
            "--kv-transfer-config",
            json.dumps(config),
            "--registration-interval",
            "0.2",
            port=port,
        )
        with running(rogue):
            decode_url = next(u["url"] for n, u in units.items() if n == "decode-0")
            fault_on(decode_url, {"fault": "mode", "mode": "write"})
            try:
                send(
                    registry,
                    msgpack.packb({"type": "D", "http_address": "127.0.0.1:1", "dp_size": 0}),
                )
                wait_until(lambda: len(refused_events(plane)) >= 2, 20, "refusal events")
                for _ in range(10):
                    assert complete(proxy_port)["usage"]["completion_tokens"] == 8
            finally:
                fault_on(decode_url, None)
            served = metric_value(rogue.metrics(), "vllm:request_success_total")
            assert served == 0
            _, raw = http_get(proxy_url + "/admin/instances", headers=headers)
            listed = {(i["url"], i["group"]) for i in json.loads(raw)["instances"]}
            assert all(group == "read" for _, group in listed) and len(listed) == 2
            assert rogue.url not in {u for u, _ in listed}
            messages = refused_events(plane)
            assert any(rogue.url in m and "'http_address'" in m for m in messages), messages
            assert any(decode_url in m and "'transfer_mode'" in m for m in messages), messages
            text = http_get(proxy_url + "/metrics")[1].decode()
            assert (
                metric_value(text, "pdctl_proxy_registry_rejected_total", reason="malformed") >= 1
            )

        # a switch the controller runs is expected: the instances move, nothing is refused
        before = len(refused_events(plane))
        record = plane.switch("mori", "write", "hold")
        assert record["state"] == "done", record
        assert complete(proxy_port)["usage"]["completion_tokens"] == 8
        _, raw = http_get(proxy_url + "/admin/registry", headers=headers)
        registry_state = json.loads(raw)
        assert {tuple(e["modes"]) for e in registry_state["expected"]} == {("write",)}
        assert len(refused_events(plane)) == before
    finally:
        with contextlib.suppress(TimeoutError, AssertionError):
            plane.api("POST", "/deployments/mori/stop")
            plane.wait(
                "mori",
                lambda us: all(u["state"] in ("STOPPED", "EXITED") for u in us.values()),
                30,
            )
        plane.close()
