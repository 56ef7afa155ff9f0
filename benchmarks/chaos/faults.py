"""Chaos rows that hit processes: SIGKILL and SIGSTOP, switches issued twice or while an
instance crash-loops, and `pdctl serve` killed in the middle of writes.

What happens to a hung (SIGSTOPped) instance, by design: the proxy fails each request on it
once its leg has been silent for the deployment's decode timeout (or the prefill timeout),
with a 502 naming the leg and the instance, and stops routing to it when its own /health
probe times out; the controller counts three failed /health probes (about 3 x 2 s), then
SIGTERMs it followed by SIGCONT (so a stopped process can act on it) and starts a new one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from benchmarks.chaos.load import (
    DECODE_TIMEOUT,
    NAME,
    PROXY_GONE,
    Row,
    Target,
    recovered,
    under_load,
    wait_for,
)


def signal_unit(target: Target, unit: str, sig: int) -> int:
    pid = target.plane.units()[unit]["pid"]
    os.kill(pid, sig)
    return pid


def routed(target: Target, url: str) -> bool:
    """The proxy routes to `url` (listed healthy, not drained, not ejected)."""
    for i in target.instances():
        if i["url"] == url:
            return i["healthy"] and not i["draining"] and not i["ejected_for_s"]
    return False


def answered_within(row: Row, seconds: float) -> None:
    """Every failed request got its error within `seconds` (a timeout, not a hang)."""
    slowest = max((r["e2el"] for r in row.errors), default=0.0)
    row.notes.append(f"slowest error after {slowest:.1f} s")
    row.check(slowest <= seconds, f"every error within {seconds:g} s")


def kill(
    target: Target, *units: str, expected: str = "restarted; meanwhile 502/503 naming it"
) -> Row:
    row = Row(f"SIGKILL {' + '.join(u.split('-')[0] for u in units)}", expected)
    if units == ("proxy",):
        row.also_clear = PROXY_GONE

    def inject(row: Row) -> None:
        before = target.plane.units()
        for unit in units:
            signal_unit(target, unit, signal.SIGKILL)
        begin = time.monotonic()
        deadline = begin + 30
        while time.monotonic() < deadline:  # each restarted: a new pid
            now = target.plane.units()
            if all(now.get(u, {}).get("pid") not in (None, before[u]["pid"]) for u in units):
                break
            time.sleep(0.1)
        else:
            row.check(False, f"restarted: {[(u, now.get(u, {}).get('state')) for u in units]}")
            return
        if "proxy" in units:  # the instances register again by themselves
            n = len(before) - 1  # every instance registers again
            back = wait_for(lambda: len(target.instances()) == n, 30, 0.05)
            row.check(back is not None, f"all {n} instances registered again")
            row.notes.append(f"all registered {time.monotonic() - begin:.1f} s after the kill")

    return under_load(target, row, inject)


def kill_serve(target: Target) -> Row:
    row = Row("SIGKILL serve", "adopted, nothing fails", may_fail=False)

    def inject(row: Row) -> None:
        plane = target.plane
        pids = {n: u["pid"] for n, u in plane.units().items()}
        plane.server.kill()
        time.sleep(1.0)
        plane.start()
        adopted = {n: u["pid"] for n, u in plane.units().items()}
        if row.check(adopted == pids, f"same pids adopted: {pids} -> {adopted}"):
            row.notes.append("same pids adopted")

    return under_load(target, row, inject)


def stop_decode(target: Target, seconds: float) -> Row:
    row = Row(
        f"SIGSTOP decode {seconds:g}s",
        f"in-flight 502 after {DECODE_TIMEOUT:g} s; replaced by the supervisor",
    )

    def inject(row: Row) -> None:
        url = target.unit_url("decode-0")
        pid = signal_unit(target, "decode-0", signal.SIGSTOP)
        begin = time.monotonic()
        deadline = begin + seconds
        replaced = None
        if target.plane.layout != "1p1d":  # with a spare: how soon the proxy routes around it
            out = wait_for(lambda: not routed(target, url), seconds / 2, 0.05)
            row.notes.append("never ejected" if out is None else f"ejected after {out:.1f} s")
        while replaced is None and time.monotonic() < deadline:
            if target.plane.units()["decode-0"]["pid"] not in (pid, None):
                replaced = time.monotonic() - begin
                row.recovery_s = recovered(
                    target.plane, target.proxy_url, begin, deadline - time.monotonic()
                )
            time.sleep(0.2)
        time.sleep(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        if row.check(replaced is not None, f"replaced within the {seconds:g} s stop"):
            row.notes.append(f"new decode after {replaced:.1f} s")

    row = under_load(target, row, inject)
    answered_within(row, DECODE_TIMEOUT + 3)
    return row


def other_mode(target: Target) -> str:
    spec = target.plane.api("GET", f"/deployments/{NAME}")[1]["spec"]
    return "write" if spec["groups"][0]["mode"] == "read" else "read"


def switch_twice(target: Target) -> Row:
    row = Row("switch twice at once", "202 + 409, switch done")

    def inject(row: Row) -> None:
        plane, mode = target.plane, other_mode(target)
        answers: list[tuple[int, Any]] = []

        def post() -> None:
            answers.append(
                plane.api(
                    "POST",
                    f"/deployments/{NAME}/switch",
                    {"mode": mode, "strategy": "hold", "reason": "chaos"},
                )
            )

        threads = [threading.Thread(target=post) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        codes = sorted(a[0] for a in answers)
        refused = [a[1] for a in answers if a[0] == 409]
        row.notes.append(f"answers {codes}: {str(refused[0]['detail'])[:70] if refused else ''}")
        if not row.check(codes == [202, 409], "one switch accepted, one refused"):
            return
        record = next(a[1] for a in answers if a[0] == 202)
        deadline = time.monotonic() + 90
        while record["state"] == "running" and time.monotonic() < deadline:
            time.sleep(0.3)
            record = plane.api("GET", f"/deployments/{NAME}/switches/{record['id']}")[1]
        row.check(record["state"] == "done", f"switch done, not {record['state']}")

    return under_load(target, row, inject)


def switch_while_crash_looping(target: Target) -> Row:
    row = Row("switch while crash-looping", "409 naming the instance")

    def inject(row: Row) -> None:
        plane = target.plane
        units = plane.units()
        port = int(units["decode-0"]["url"].rsplit(":", 1)[1])
        blocker = socket.socket()
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        os.kill(units["decode-0"]["pid"], signal.SIGKILL)
        try:
            for _ in range(100):  # take its port as soon as it is free: restarts fail
                with contextlib.suppress(OSError):
                    blocker.bind(("127.0.0.1", port))
                    blocker.listen(1)
                    break
                time.sleep(0.02)
            time.sleep(3.0)
            state = plane.units()["decode-0"]["state"]
            status, body = plane.api(
                "POST",
                f"/deployments/{NAME}/switch",
                {"mode": other_mode(target), "strategy": "hold", "reason": "chaos"},
            )
            row.notes.append(f"decode {state}; switch {status}: {str(body['detail'])[:80]}")
            # refused, and for the instance that is down (not for some other reason)
            row.check(status == 409 and "decode-0" in str(body["detail"]), "409 naming decode-0")
        finally:
            blocker.close()

    return under_load(target, row, inject)


def kill_serve_mid_write(target: Target) -> Row:
    """Deployments created back to back; serve is SIGKILLed among them, then restarted: the
    file passes integrity_check and every create that was answered 201 is there."""
    plane = target.plane
    row = Row("serve SIGKILL mid-write", "integrity ok, no acked write lost")
    acked: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        for i in range(400):
            if stop.is_set():
                return
            body = {
                "name": f"w{i}",
                "engine": "sim",
                "model": "tiny",
                "topology": "colocated",
                "groups": [{"name": "main", "role": "colocated"}],
            }
            row.sent += 1
            try:
                status, _ = plane.api("POST", "/deployments", body)
            except OSError:
                return
            if status == 201:
                acked.append(f"w{i}")

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(2.0)
    begin = time.monotonic()
    plane.server.kill()
    stop.set()
    thread.join(30)
    check = sqlite3.connect(plane.db).execute("PRAGMA integrity_check").fetchone()[0]
    plane.start()
    row.recovery_s = time.monotonic() - begin
    names = {d["name"] for d in plane.api("GET", "/deployments")[1]}
    missing = [n for n in acked if n not in names]
    row.completed, row.failed_clear = len(acked), row.sent - len(acked)
    row.lost = len(missing)
    row.notes.append(f"integrity_check {check}; {len(acked)} acked, {len(missing)} missing")
    row.check(check == "ok" and not missing, "integrity ok and every acked write kept")
    return row


ROWS: dict[str, Callable[[Target], Row]] = {
    "SIGKILL decode": lambda t: kill(t, "decode-0"),
    "SIGKILL prefill": lambda t: kill(t, "prefill-0"),
    "SIGKILL both": lambda t: kill(t, "prefill-0", "decode-0", expected="both restarted"),
    "SIGKILL proxy": lambda t: kill(t, "proxy", expected="restarted, clients see reset"),
    "SIGKILL serve": kill_serve,
    "SIGSTOP decode": lambda t: stop_decode(t, 12.0),
    "switch twice at once": switch_twice,
    "switch while crash-looping": switch_while_crash_looping,
}
