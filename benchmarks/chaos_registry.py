"""Chaos rows on the proxy's ZMQ registry (PROTOCOL.md section 2): an instance's heartbeats
stop while it keeps running; an instance re-registers in the other mode; a flood of bogus
registrations arrives while real traffic flows.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgpack
import zmq

from benchmarks.chaos_load import NAME, Row, Target, fault_on, under_load, wait_for
from connector.registry import MISSED_BEATS, NEW_INTERVAL
from connector.settings import ProxySettings
from tests.processes import http_get, metric_value

EXPIRY_S = MISSED_BEATS * NEW_INTERVAL  # the deployment's proxy runs the real intervals
BOGUS = 2000  # made-up instances (valid messages) in the flood
REGISTRY_MAX = ProxySettings().registry_max_instances  # the deployment's proxy: the default
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


def mode_move(target: Target) -> Row:
    row = Row("decode re-registers in the other mode", "moves to that mode's group, then back")

    def inject(row: Row) -> None:
        url, mode = target.unit_url("decode-0"), decode_group(target)
        other = "write" if mode == "read" else "read"
        fault_on(url, {"fault": "mode", "mode": other})
        try:
            moved = wait_for(lambda: decode_group(target) == other, 10)
            if row.check(moved is not None, f"moved to the {other} group"):
                row.notes.append(f"in the {other} group after {moved:.1f} s")
            time.sleep(1.0)  # no decode in its own group meanwhile: 503 saying so
        finally:
            fault_on(url, None)
        back = wait_for(lambda: decode_group(target) == mode, 10)
        row.check(back is not None, f"back in the {mode} group")

    return under_load(target, row, inject)


def rejected(target: Target) -> dict[str, float]:
    text = http_get(target.proxy_url + "/metrics")[1].decode()
    return {
        r: metric_value(text, "pdctl_proxy_registry_rejected_total", reason=r)
        for r in ("full", "malformed")
    }


def flood(target: Target) -> Row:
    row = Row("bogus registration flood", "refused or never routed; nothing fails", may_fail=False)

    def inject(row: Row) -> None:
        begin, before = time.monotonic(), rejected(target)
        ctx = zmq.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.SNDHWM, 100_000)
        dealer.connect(f"tcp://127.0.0.1:{target.registry_port}")
        try:
            for i in range(BOGUS):  # loopback hosts on a closed port, some unroutable ones
                host = (
                    f"10.255.{i // 250}.{i % 250 + 1}"
                    if i % 10 == 0
                    else f"127.0.{i // 250 + 1}.{i % 250 + 1}"
                )
                dealer.send(
                    msgpack.packb(
                        {"type": "PD"[i % 2], "http_address": f"{host}:9", "transfer_mode": "READ"}
                    )
                )
                if i % 4 == 0:
                    dealer.send(MALFORMED[(i // 4) % len(MALFORMED)])
            refusals = BOGUS - (REGISTRY_MAX - 2) + BOGUS // 4  # over the cap, malformed
            counted = wait_for(
                lambda: sum(rejected(target).values()) - sum(before.values()) >= refusals, 15, 0.3
            )
        finally:
            dealer.close(linger=0)
            ctx.term()
        now = rejected(target)
        row.notes.append(
            f"refused: {now['full'] - before['full']:.0f} full, "
            f"{now['malformed'] - before['malformed']:.0f} malformed"
        )
        row.check(counted is not None, "every refusal counted")
        listed = target.instances()
        real = [i for i in listed if not i["url"].endswith(":9")]
        row.check(len(listed) <= 256, f"the registry stays bounded ({len(listed)} listed)")
        row.check(len(real) == 2 and all(i["healthy"] for i in real), "the real pair serves")
        row.check(
            not any(i["healthy"] for i in listed if i["url"].endswith(":9")),
            "no bogus instance is routable",
        )
        gone = wait_for(lambda: len(target.instances()) == 2, 30, 0.5)
        if row.check(gone is not None, "the bogus ones expire"):
            row.recovery_s = time.monotonic() - begin
            row.notes.append("recovery = flood start to the bogus ones expired")
        log = target.plane.tmp / "runs" / NAME / "proxy" / "output.log"
        logged = sum("registry: refused" in line for line in log.read_text().splitlines())
        row.check(logged <= 30, f"refusals logged sparingly ({logged} lines)")

    return under_load(target, row, inject)


ROWS: dict[str, Callable[[Target], Row]] = {
    "heartbeats stop": heartbeats_stop,
    "re-registers in the other mode": mode_move,
    "registration flood": flood,
}
