"""`make chaos`: a fault campaign on real processes, each fault under a steady `pdctl bench` load.

A real `pdctl serve` runs a stand-in MoRIIO deployment (tiny model, 1 prefill + 1 decode +
proxy, each under its `pdctl run-instance` shim). Per fault: start the load, inject the fault
mid-load, time the recovery (every unit RUNNING and a completion through the proxy served),
then read every request the load sent. A request is *lost* when it never got an answer or an
error (the client timed out, or never recorded it): that must be 0 in every row. A failed
request must carry an error naming what failed. The summary table goes to stdout; the exit
status is 1 when a row's expectation does not hold. `--quick` runs a shorter campaign (CI).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.control_plane import ControlPlane
from tests.processes import ROOT, http_post

NAME = "chaos"
RATE = 4.0
CLIENT_TIMEOUT = 60.0  # longer than any recovery: a request timing out here is lost
# Words in an error that say what failed (a leg, an instance, the proxy, a connection).
NAMED = ("prefill", "decode", "instance", "proxy", "connect", "Disconnected", "hold",
         "switch", "restart", "HTTP 5", "stream ended")


@dataclass
class Row:
    fault: str
    sent: int = 0
    completed: int = 0
    failed_clear: int = 0
    lost: int = 0
    recovery_s: float | None = None
    expected: str = ""
    ok: bool = True
    notes: list[str] = field(default_factory=list)


class Plane(ControlPlane):
    """The chaos deployment's control plane."""

    def units(self) -> dict[str, dict]:
        return self.status(NAME)


def deployment() -> dict:
    return {"name": NAME, "engine": "sim", "model": "tiny", "topology": "disaggregated",
            "connector": "MoRIIOConnector", "prefix_caching": False,
            "groups": [{"name": "prefill", "role": "prefill", "mode": "read"},
                       {"name": "decode", "role": "decode", "mode": "read"}],
            "proxy": {"hold_queue": 256, "hold_deadline_s": 30}}


def served(proxy_url: str) -> bool:
    try:
        status, _ = http_post(proxy_url + "/v1/completions",
                              {"model": "tiny", "prompt": "a b c", "max_tokens": 2}, timeout=5)
    except OSError:
        return False
    return status == 200


def recovered(plane: Plane, proxy_url: str, since: float, limit: float = 90.0) -> float | None:
    """Seconds from `since` until every unit is RUNNING and the proxy serves; None if never."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        units = plane.units()
        if units and all(u["state"] == "RUNNING" for u in units.values()) and served(proxy_url):
            return time.monotonic() - since
        time.sleep(0.2)
    return None


class Load:
    """`pdctl bench` in the background, every request kept (--save-requests)."""

    def __init__(self, tmp: Path, proxy_url: str, tag: str, prompts: int) -> None:
        self.out, self.prompts = tmp / f"load-{tag}.json", prompts
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "pdctl.py"), "bench", "--base-url", proxy_url,
             "--model", "tiny", "--request-rate", str(RATE), "--num-prompts", str(prompts),
             "--input-len", "64", "--output-len", "16", "--result-json", str(self.out),
             "--save-requests", "--quiet", "--timeout", str(CLIENT_TIMEOUT)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)

    def finish(self, row: Row) -> None:
        try:
            self.proc.wait(timeout=self.prompts / RATE + CLIENT_TIMEOUT + 60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        row.sent += self.prompts
        if not self.out.exists():
            row.lost += self.prompts
            row.notes.append("bench wrote no result: " + self.proc.stderr.read().decode()[-200:])
            return
        requests = json.loads(self.out.read_text())["requests"]
        errors: dict[str, int] = {}
        for r in requests:
            if r["ok"]:
                row.completed += 1
            elif not r["error"] or r["error"].startswith("timed out"):
                row.lost += 1
            elif any(word in r["error"] for word in NAMED):
                row.failed_clear += 1
                errors[r["error"][:90]] = errors.get(r["error"][:90], 0) + 1
            else:  # an error that does not say what failed counts against the row
                row.lost += 1
                row.notes.append(f"unclear error: {r['error'][:90]}")
        row.lost += self.prompts - len(requests)
        row.notes += [f"{n}x {e}" for e, n in sorted(errors.items(), key=lambda x: -x[1])[:2]]


def signal_unit(plane: Plane, unit: str, sig: int) -> int:
    pid = plane.units()[unit]["pid"]
    os.kill(pid, sig)
    return pid


def under_load(plane: Plane, proxy_url: str, tmp: Path, fault: str, prompts: int,
               inject: Callable[[Row], None], expected: str) -> Row:
    row = Row(fault, expected=expected)
    load = Load(tmp, proxy_url, fault.replace(" ", "-"), prompts)
    time.sleep(2.0)  # mid-load
    begin = time.monotonic()
    inject(row)
    if row.recovery_s is None:
        row.recovery_s = recovered(plane, proxy_url, begin)
    load.finish(row)
    row.ok = row.ok and row.lost == 0 and row.recovery_s is not None
    return row


def kill_units(plane: Plane, *units: str) -> Callable[[Row], None]:
    def inject(row: Row) -> None:
        before = plane.units()
        for unit in units:
            signal_unit(plane, unit, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # each restarted: a new pid
            now = plane.units()
            if all(now.get(u, {}).get("pid") not in (None, before[u]["pid"]) for u in units):
                return
            time.sleep(0.1)
        row.ok = False
        row.notes.append(f"not restarted: {[(u, now.get(u)) for u in units]}")
    return inject


def kill_serve(plane: Plane) -> Callable[[Row], None]:
    def inject(row: Row) -> None:
        pids = {n: u["pid"] for n, u in plane.units().items()}
        plane.proc.kill()
        time.sleep(1.0)
        plane.start()
        adopted = {n: u["pid"] for n, u in plane.units().items()}
        if adopted != pids:
            row.ok = False
            row.notes.append(f"not adopted: {pids} -> {adopted}")
        else:
            row.notes.append("same pids adopted")
    return inject


def stop_decode(plane: Plane, seconds: float) -> Callable[[Row], None]:
    def inject(row: Row) -> None:
        pid = signal_unit(plane, "decode-0", signal.SIGSTOP)
        time.sleep(seconds)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        replaced = plane.units()["decode-0"]["pid"] != pid
        row.notes.append("replaced by the supervisor" if replaced else "resumed")
    return inject


def other_mode(plane: Plane) -> str:
    spec = plane.api("GET", f"/deployments/{NAME}")[1]["spec"]
    return "write" if spec["groups"][0]["mode"] == "read" else "read"


def double_switch(plane: Plane) -> Callable[[Row], None]:
    def inject(row: Row) -> None:
        mode = other_mode(plane)
        answers: list[tuple[int, object]] = []

        def post() -> None:
            answers.append(plane.api("POST", f"/deployments/{NAME}/switch",
                                     {"mode": mode, "strategy": "hold", "reason": "chaos"}))

        threads = [threading.Thread(target=post) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        codes = sorted(a[0] for a in answers)
        refused = [a[1] for a in answers if a[0] == 409]
        row.notes.append(f"answers {codes}: {str(refused[0]['detail'])[:70] if refused else ''}")
        if codes != [202, 409]:
            row.ok = False
            return
        record = next(a[1] for a in answers if a[0] == 202)
        deadline = time.monotonic() + 90
        while record["state"] == "running" and time.monotonic() < deadline:
            time.sleep(0.3)
            record = plane.api("GET", f"/deployments/{NAME}/switches/{record['id']}")[1]
        row.ok = row.ok and record["state"] == "done"
        row.notes.append(f"switch {record['state']}")
    return inject


def switch_while_crash_looping(plane: Plane) -> Callable[[Row], None]:
    def inject(row: Row) -> None:
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
            status, body = plane.api("POST", f"/deployments/{NAME}/switch",
                                     {"mode": other_mode(plane), "strategy": "hold",
                                      "reason": "chaos"})
            row.notes.append(f"decode {state}; switch {status}: {str(body['detail'])[:80]}")
            # refused, and for the instance that is down (not for some other reason)
            row.ok = status == 409 and "decode-0" in str(body["detail"])
        finally:
            blocker.close()
    return inject


def kill_serve_mid_write(plane: Plane, tmp: Path) -> Row:
    """Deployments created back to back; serve is SIGKILLed among them, then restarted: the
    file passes integrity_check and every create that was answered 201 is there."""
    row = Row("serve SIGKILL mid-write", expected="integrity ok, no acked write lost")
    acked: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        for i in range(400):
            if stop.is_set():
                return
            body = {"name": f"w{i}", "engine": "sim", "model": "tiny", "topology": "colocated",
                    "groups": [{"name": "main", "role": "colocated"}]}
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
    plane.proc.kill()
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
    row.ok = check == "ok" and not missing
    return row


def campaign(tmp: Path, quick: bool, only: str | None = None) -> list[Row]:
    plane = Plane(tmp).start()
    rows: list[Row] = []
    prompts = 40 if quick else 60
    try:
        status, created = plane.api("POST", "/deployments", deployment())
        assert status == 201, created
        proxy_url = f"http://127.0.0.1:{created['ports']['proxy']}"
        plane.api("POST", f"/deployments/{NAME}/start")
        if recovered(plane, proxy_url, time.monotonic(), 120) is None:
            raise RuntimeError(f"deployment never came up: {plane.units()}")
        faults = [
            ("SIGKILL decode", kill_units(plane, "decode-0"), "restarted, in-flight 502"),
            ("SIGKILL prefill", kill_units(plane, "prefill-0"), "restarted, in-flight 502"),
            ("SIGKILL both", kill_units(plane, "prefill-0", "decode-0"), "both restarted"),
            ("SIGKILL proxy", kill_units(plane, "proxy"), "restarted, clients see reset"),
            ("SIGKILL serve", kill_serve(plane), "adopted, nothing fails"),
            ("SIGSTOP decode 12s", stop_decode(plane, 12.0), "replaced or resumed"),
            ("switch twice at once", double_switch(plane), "202 + 409, switch done"),
            ("switch while crash-looping", switch_while_crash_looping(plane), "409 w/ reason"),
        ]
        if quick:
            faults = [faults[0], faults[3], faults[4], faults[6]]
        if only:
            faults = [f for f in faults if only in f[0]]
        for fault, inject, expected in faults:
            print(f"chaos: {fault} ...", file=sys.stderr, flush=True)
            rows.append(under_load(plane, proxy_url, tmp, fault, prompts, inject, expected))
        print("chaos: serve SIGKILL mid-write ...", file=sys.stderr, flush=True)
        rows.append(kill_serve_mid_write(plane, tmp))
    finally:
        with contextlib.suppress(OSError, AttributeError):
            plane.api("POST", f"/deployments/{NAME}/stop")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                    u["state"] not in ("STOPPED", "EXITED") for u in plane.units().values()):
                time.sleep(0.3)
        plane.proc.stop()
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| fault | sent | completed | failed (clear error) | lost | recovery s | ok | notes |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        rec = "never" if r.recovery_s is None else f"{r.recovery_s:.1f}"
        lines.append(f"| {r.fault} | {r.sent} | {r.completed} | {r.failed_clear} | {r.lost} | "
                     f"{rec} | {'yes' if r.ok else 'NO'} | {'; '.join(r.notes)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer faults (CI)")
    parser.add_argument("--only", help="only the faults whose name contains this")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pdctl-chaos-") as tmp:
        rows = campaign(Path(tmp), args.quick, args.only)
    print(table(rows))
    print(f"\n{len(rows)} faults in {time.monotonic() - started:.0f} s; "
          f"{sum(not r.ok for r in rows)} not as expected")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
