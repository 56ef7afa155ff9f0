"""The registry of a real `pdctl proxy` against hostile senders: a poisoned message, a huge
one, a rogue instance and a role grab under pinned expectations, and an admin API that is
never open."""

import json
import os
import stat
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from harness.processes import (
    ADMIN,
    ADMIN_TOKEN,
    Process,
    free_port,
    http_get,
    http_post,
    metric_value,
    running,
)
from harness.stack import instances, moriio_sim, proxy, wait_until, zmq_address

pytestmark = pytest.mark.e2e

POISON = [
    {"type": "D", "http_address": "127.0.0.1:30005", "dp_size": float("inf")},
    {"type": "D", "http_address": "127.0.0.1:30005", "dp_size": 0},
    {"type": "D", "http_address": "127.0.0.1:30005", "dp_size": -5},
    {"type": "D", "http_address": "127.0.0.1:30005", "dp_size": 2**63},
    {"type": "D", "http_address": "127.0.0.1:30005", "tp_size": 0},
    {"type": "D", "http_address": "127.0.0.1:-1"},
    {"type": "D", "http_address": f"127.0.0.1:{2**64 - 1}"},
    {"type": "D", "http_address": "http://user@127.0.0.1:1"},
]


def send(port: int, *payloads: bytes) -> None:
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 2000)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    try:
        for payload in payloads:
            dealer.send(payload)
    finally:
        dealer.close(linger=2000)
        ctx.term()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def served_by(proc: Process) -> float:
    return metric_value(proc.metrics(), "vllm:request_success_total")


def complete(front: Process, n: int) -> list[int]:
    body = {"model": "tiny", "prompt": "hello there", "max_tokens": 3}
    return [http_post(front.url + "/v1/completions", body)[0] for _ in range(n)]


def test_poisoned_and_huge_registrations_leave_the_registry_serving(tmp_path):
    ping = free_port()
    front = proxy(tmp_path, "proxy", "--connector", "moriio", registry_port=ping)
    with running(front):
        p = moriio_sim(tmp_path, "p", "kv_producer", True, ping)
        d = moriio_sim(tmp_path, "d", "kv_consumer", True, ping)
        with running(p, d):
            wait_until(lambda: len(instances(front)) == 2, 30, "the pair registered")
            send(ping, *(msgpack.packb(m) for m in POISON))
            before = rss_mb(front.proc.pid)
            send(ping, b"\x81\xa4type\xa1D" + b"\x00" * (300 << 20))  # a 300 MB message
            # three heartbeat expiries later the real pair is still registered and serving
            time.sleep(2.0)
            assert {i["url"] for i in instances(front)} == {p.url, d.url}
            assert complete(front, 3) == [200, 200, 200]
            text = front.metrics()
            refused = metric_value(text, "pdctl_proxy_registry_rejected_total", reason="malformed")
            assert refused == len(POISON)
            assert rss_mb(front.proc.pid) < max(150, before + 20)
            assert "Traceback" not in front.log()


def test_pinned_expectations_refuse_a_rogue_and_a_role_grab(tmp_path):
    ping = free_port()
    p = moriio_sim(tmp_path, "p", "kv_producer", True, ping)
    d = moriio_sim(tmp_path, "d", "kv_consumer", True, ping)
    rogue = moriio_sim(tmp_path, "rogue", "kv_consumer", True, ping)
    expected = [
        {"url": p.url, "role": "prefill", "modes": ["read"], "zmq_address": zmq_address(p)},
        {"url": d.url, "role": "decode", "modes": ["read"], "zmq_address": zmq_address(d)},
    ]
    port = free_port()
    front = Process(
        [
            *("proxy", "--port", str(port), "--connector", "moriio"),
            *("--registry-port", str(ping), "--heartbeat-scale", "0.2"),
        ],
        port,
        env={
            "PDCTL_ADMIN_TOKEN": ADMIN_TOKEN,
            "PDCTL_REGISTRY_EXPECTED": json.dumps(expected),  # as pdctl serve hands it over
        },
        log_path=tmp_path / "pinned.log",
    )
    with running(front, p, d, rogue):
        wait_until(lambda: len(instances(front)) == 2, 30, "the pair registered")
        # the real decode's URL claimed as a prefill, in the other mode
        grab = {"type": "P", "http_address": d.url[7:], "transfer_mode": "WRITE"}
        send(ping, msgpack.packb(grab))
        assert complete(front, 10) == [200] * 10
        assert served_by(rogue) == 0
        assert {(i["url"], i["role"]) for i in instances(front)} == {
            (p.url, "prefill"),
            (d.url, "decode"),
        }
        status, raw = http_get(front.url + "/admin/registry", headers=ADMIN)
        refusals = {(r["url"], r["field"]) for r in json.loads(raw)["refusals"]}
        assert status == 200
        assert (rogue.url, "http_address") in refusals
        assert (d.url, "type") in refusals


def test_a_standalone_proxy_without_a_token_writes_one_and_guards_admin(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PDCTL_ADMIN_TOKEN"}
    env["PDCTL_RUNTIME_DIR"] = str(tmp_path / "run")
    front = Process(
        ["proxy", "--port", str(port), "--mode", "colocated", "--registry-port", "-1"],
        port,
        env=env,
        log_path=tmp_path / "proxy.log",
    )
    with running(front):
        path = tmp_path / "run" / f"proxy-{port}.admin-token"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        token = path.read_text().strip()
        assert str(path) in front.log()
        assert token not in Path(f"/proc/{front.proc.pid}/cmdline").read_text()
        pause = front.url + "/admin/groups/colocated/pause"
        assert http_post(pause, {})[0] == 401
        assert http_post(pause, {}, headers={"Authorization": "Bearer nope"})[0] == 401
        assert http_post(pause, {}, headers={"Authorization": f"Bearer {token}"})[0] == 200
