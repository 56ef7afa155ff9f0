"""Chaos rows on the proxy's ZMQ registry (PROTOCOL.md section 2), under `pdctl serve`, whose
proxy accepts only the registrations the controller launched: an instance's heartbeats stop
while it keeps running; an instance re-registers in the other mode; malformed messages; a
rogue instance; a flood of bogus registrations while real traffic flows, and one at a proxy
restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable

import msgpack
import zmq

from benchmarks.chaos.faults import PROXY_GONE
from benchmarks.chaos.load import NAME, Row, Target, fault_on, under_load, wait_for
from connector.registry.table import MISSED_BEATS, NEW_INTERVAL
from harness.processes import Process, free_port, http_get, metric_value, sim

EXPIRY_S = MISSED_BEATS * NEW_INTERVAL  # the deployment's proxy runs the real intervals
BOGUS = 2000  # made-up instances (valid messages) in the flood
MALFORMED = [b"\xc1", b"\x93\x01\x02", b"not msgpack at all", b"\x81\xa4type\xa2P"]


def decode_group(target: Target) -> str | None:
    return next((i["group"] for i in target.instances() if i["role"] == "decode"), None)


def heartbeats_stop(target: Target) -> Row:
    row = Row(
        "heartbeats stop (decode)", f"dropped after ~{EXPIRY_S:g} s, in-flight answered, replaced"
    )

    def inject(row: Row) -> None:
        pid = target.plane.units()["decode-0"]["pid"]
        fault_on(target.unit_url("decode-0"), {"fault": "silent"})
        dropped = wait_for(lambda: decode_group(target) is None, EXPIRY_S + 10)
        if row.check(
            dropped is not None and dropped <= EXPIRY_S + 3,
            f"dropped from its group within {EXPIRY_S + 3:g} s",
        ):
            row.notes.append(f"dropped after {dropped:.1f} s")
        replaced = wait_for(lambda: target.plane.units()["decode-0"]["pid"] not in (pid, None), 30)
        if row.check(replaced is not None, "replaced by the supervisor"):
            row.notes.append(f"replaced {replaced:.1f} s after that")

    return under_load(target, row, inject, prompts=max(target.prompts, 100))


def refusal_events(target: Target) -> list[str]:
    _, events = target.plane.api("GET", f"/events?deployment={NAME}&kind=registry.refused")
    return [e["message"] for e in events] if isinstance(events, list) else []


def real_pair_serves(target: Target, row: Row, during: str) -> None:
    listed = target.instances()
    real = [
        i for i in listed if i["url"] in {target.unit_url("prefill-0"), target.unit_url("decode-0")}
    ]
    row.check(
        len(listed) == 2 and len(real) == 2 and all(i["healthy"] for i in real),
        f"only the real pair is registered {during} ({len(listed)} listed)",
    )


def mode_move(target: Target) -> Row:
    row = Row(
        "decode re-registers in the other mode",
        "refused naming transfer_mode, reported as an event; it keeps serving in its group",
        may_fail=False,
    )

    def inject(row: Row) -> None:
        url, mode = target.unit_url("decode-0"), decode_group(target)
        other = "write" if mode == "read" else "read"
        before = len(refusal_events(target))
        fault_on(url, {"fault": "mode", "mode": other})
        try:
            told = wait_for(
                lambda: any(
                    url in m and "'transfer_mode'" in m for m in refusal_events(target)[before:]
                ),
                15,
                0.3,
            )
            if row.check(told is not None, "an event names the decode and transfer_mode"):
                row.notes.append(f"reported after {told:.1f} s")
            time.sleep(2 * NEW_INTERVAL)  # several refused heartbeats
            row.check(decode_group(target) == mode, f"still in the {mode} group")
        finally:
            fault_on(url, None)

    return under_load(target, row, inject)


def send_all(port: int, payloads: list[bytes]) -> None:
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 2000)
    dealer.setsockopt(zmq.SNDHWM, 100_000)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    try:
        for payload in payloads:
            dealer.send(payload)
    finally:
        dealer.close(linger=2000)
        ctx.term()


POISON = [
    {"type": "D", "http_address": "127.0.0.1:30005", "dp_size": float("inf")},
    {"type": "P", "http_address": "127.0.0.1:30006", "dp_size": 2**63},
    {"type": "D", "http_address": "127.0.0.1:30005", "tp_size": 0},
    {"type": "D", "http_address": f"127.0.0.1:{2**64 - 1}"},
    {"type": "D", "http_address": "http://user@127.0.0.1:1"},
    {"type": "D", "http_address": "127.0.0.1:30005", "zmq_address": "host:x,handshake:-1,notify:1"},
]


def malformed(target: Target) -> Row:
    row = Row(
        "malformed registration",
        "refused and counted; the registry keeps serving the real pair",
        may_fail=False,
    )

    def inject(row: Row) -> None:
        before = rejected(target)["malformed"]
        send_all(target.registry_port, [msgpack.packb(m) for m in POISON] * 5)
        counted = wait_for(
            lambda: rejected(target)["malformed"] - before >= 5 * len(POISON), 10, 0.3
        )
        row.check(counted is not None, "every malformed message counted")
        time.sleep(EXPIRY_S + 1)  # past a heartbeat expiry: the real pair still registers
        real_pair_serves(target, row, "after the poison")

    return under_load(target, row, inject)


def rogue(target: Target) -> Row:
    row = Row(
        "rogue registration",
        "a stand-in the controller did not launch is refused; no request reaches it",
        may_fail=False,
    )

    def inject(row: Row) -> None:
        proc = rogue_stand_in(target)
        try:
            told = wait_for(
                lambda: any(
                    proc.url in m and "'http_address'" in m for m in refusal_events(target)
                ),
                15,
                0.3,
            )
            if row.check(told is not None, "an event names the rogue"):
                row.notes.append(f"reported after {told:.1f} s")
            time.sleep(2 * NEW_INTERVAL)
            served = metric_value(proc.metrics(), "vllm:request_success_total")
            row.check(served == 0, f"0 requests routed to the rogue ({served:.0f})")
            real_pair_serves(target, row, "while the rogue registers")
        finally:
            proc.stop()

    return under_load(target, row, inject)


def rogue_stand_in(target: Target) -> Process:
    port = free_port()
    config = {
        "kv_connector": "MoRIIOConnector",
        "kv_role": "kv_consumer",
        "kv_connector_extra_config": {
            "proxy_ip": "127.0.0.1",
            "proxy_ping_port": str(target.registry_port),
            "http_port": str(port),
            "handshake_port": str(free_port()),
            "notify_port": str(free_port()),
            "read_mode": "true",
        },
    }
    return sim(
        target.tmp, "rogue", "--kv-transfer-config", json.dumps(config), port=port
    ).wait_healthy()


def rejected(target: Target) -> dict[str, float]:
    text = http_get(target.proxy_url + "/metrics")[1].decode()
    return {
        r: metric_value(text, "pdctl_proxy_registry_rejected_total", reason=r)
        for r in ("unexpected", "sender", "malformed", "pending", "full")
    }


def bogus_messages() -> list[bytes]:
    """Made-up instances (valid messages, loopback hosts on a closed port and some outside
    loopback) with malformed ones in between."""
    out = []
    for i in range(BOGUS):
        host = (
            f"10.255.{i // 250}.{i % 250 + 1}"
            if i % 10 == 0
            else f"127.0.{i // 250 + 1}.{i % 250 + 1}"
        )
        out.append(
            msgpack.packb(
                {"type": "PD"[i % 2], "http_address": f"{host}:9", "transfer_mode": "READ"}
            )
        )
        if i % 4 == 0:
            out.append(MALFORMED[(i // 4) % len(MALFORMED)])
    return out


def flood(target: Target) -> Row:
    row = Row("bogus registration flood", "all refused, none listed; nothing fails", may_fail=False)

    def inject(row: Row) -> None:
        before = rejected(target)
        send_all(target.registry_port, bogus_messages())
        refusals = BOGUS + BOGUS // 4
        counted = wait_for(
            lambda: sum(rejected(target).values()) - sum(before.values()) >= refusals, 15, 0.3
        )
        now = rejected(target)
        row.notes.append(
            ", ".join(f"{now[r] - before[r]:.0f} {r}" for r in now if now[r] - before[r])
        )
        row.check(counted is not None, "every refusal counted")
        real_pair_serves(target, row, "through the flood")
        log = target.plane.tmp / "runs" / NAME / "proxy" / "output.log"
        logged = sum("registry: refused" in line for line in log.read_text().splitlines())
        row.check(logged <= 60, f"refusals logged sparingly ({logged} lines)")

    return under_load(target, row, inject)


def flood_at_start(target: Target) -> Row:
    row = Row(
        "registration flood at a proxy restart",
        "the restarted proxy takes only the real pair; requests only while it is down fail",
    )

    def inject(row: Row) -> None:
        row.also_clear = PROXY_GONE  # a connection refused while it restarts: the proxy is down
        pid = target.plane.units()["proxy"]["pid"]
        os.kill(pid, signal.SIGKILL)
        flooding = threading.Event()

        def keep_flooding() -> None:
            while not flooding.is_set():
                with contextlib.suppress(zmq.ZMQError):
                    send_all(target.registry_port, bogus_messages()[:600])

        flooder = threading.Thread(target=keep_flooding, daemon=True)
        flooder.start()
        try:
            back = wait_for(lambda: len(target.instances()) == 2, 30, 0.2)
            if row.check(back is not None, "the real pair registered through the flood"):
                row.notes.append(f"real pair back after {back:.1f} s")
            real_pair_serves(target, row, "while the flood goes on")
        finally:
            flooding.set()
            flooder.join(timeout=30)

    return under_load(target, row, inject)


ROWS: dict[str, Callable[[Target], Row]] = {
    "heartbeats stop": heartbeats_stop,
    "re-registers in the other mode": mode_move,
    "malformed registration": malformed,
    "rogue registration": rogue,
    "registration flood": flood,
    "registration flood at a proxy restart": flood_at_start,
}
