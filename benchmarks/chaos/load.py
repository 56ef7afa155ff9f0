"""What every chaos row shares: the deployment under test, the steady `pdctl bench` load, how a
request's outcome is judged, and how recovery is timed.

A request is *lost* when it never got an answer or an error (the client timed out, never
recorded it, or got an error that does not say what failed); that must be 0 in every row.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.control_plane import ControlPlane
from harness.processes import ROOT, http_get, http_post

NAME = "chaos"
RATE = 4.0
CLIENT_TIMEOUT = 60.0  # longer than any recovery: a request timing out here is lost
PREFILL_TIMEOUT = 5.0  # the proxy's leg timeouts in this deployment: a hung leg fails fast
DECODE_TIMEOUT = 4.0
FIRST_BYTE_TIMEOUT = 1.0  # a decode silent on every stream this long is hung (with a spare)
KV_TRANSFER_TIMEOUT = 3  # the stand-ins' MoRIIO transfer_timeout: a stale agent hangs this long
CANARY_PERIOD_S = 5.0  # the correctness canary's period here (benchmarks/chaos/canary.py)
LAYOUTS = {"1p1d": 1, "2p2d": 2, "2p2d-defaults": 2}  # instances per role
# Layouts whose proxy runs with its defaults, NIXL stand-ins: no timeout tuned for the faults
# (issue 39: hangs must be caught without tuning; benchmarks/chaos/defaults.py).
DEFAULTS = "-defaults"
# Set to run this campaign against a pdctl from before retries (the figures' "before").
BASELINE = bool(os.environ.get("PDCTL_CHAOS_BASELINE"))
REFUSED = "pdctl_proxy_retries_refused_total"
# What the proxy's errors say (the leg and its instance, or why nothing could serve): an
# error carrying none of these does not say what failed.
CLEAR = (
    "prefill leg to",
    "decode leg to",
    "colocated leg to",
    "no instance",
    "hold queue",
    "hold deadline",
    "dispatch is paused",
)
# A client whose connection to the proxy breaks sees only that; clear only where the proxy
# itself was killed.
PROXY_GONE = (
    "ClientPayloadError",
    "ServerDisconnectedError",
    "Cannot connect to host",
    "ClientOSError",
    "Connection reset",
)


@dataclass
class Row:
    fault: str
    expected: str = ""
    sent: int = 0
    completed: int = 0
    failed_clear: int = 0
    lost: int = 0
    streaming: int = 0  # failed requests whose client had a token already (it was streaming)
    retried: int = 0  # attempts the proxy retried during the row (pdctl_proxy_retries_total)
    recovery_s: float | None = None
    ok: bool = True
    skipped: str | None = None  # why the row could not run here (it does not fail the run)
    may_fail: bool = True  # False: every request must complete
    also_clear: tuple[str, ...] = ()  # errors clear in this row only
    notes: list[str] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)  # the failed requests' records

    def check(self, holds: bool, why: str) -> bool:
        """Record an expectation; a false one fails the row and says why."""
        if not holds:
            self.ok = False
            self.notes.append(f"NOT: {why}")
        return holds


class Plane(ControlPlane):
    """The chaos deployment's control plane; its stand-ins take fault injection, and log
    vLLM's stats line five times a second (so a full log disk shows at once)."""

    def __init__(self, tmp: Path, layout: str = "1p1d") -> None:
        super().__init__(tmp)
        self.layout = layout
        self.env |= {"PDCTL_SIM_FAULT_INJECTION": "1", "VLLM_LOG_STATS_INTERVAL": "0.2"}
        if layout != "1p1d":  # decodes keep a restarted prefill's stale agent, as NIXL does
            self.env["PDCTL_SIM_KV_STALE_PEER"] = "hang"

    def units(self) -> dict[str, dict]:
        return self.status(NAME)


def deployment(layout: str = "1p1d") -> dict:
    n = LAYOUTS[layout]
    untuned = layout.endswith(DEFAULTS)
    mode = {} if untuned else {"mode": "read"}  # NIXL has one mode, the decode reads
    tuned = {
        "hold_queue": 256,
        "hold_deadline_s": 30,
        "prefill_timeout_s": PREFILL_TIMEOUT,
        "decode_timeout_s": DECODE_TIMEOUT,
        **({} if BASELINE else {"first_byte_timeout_s": FIRST_BYTE_TIMEOUT}),
    }
    return {
        "name": NAME,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector" if untuned else "MoRIIOConnector",
        "prefix_caching": False,
        "kv_connector_extra_config": {"transfer_timeout": str(KV_TRANSFER_TIMEOUT)},
        "canary": {"interval_s": CANARY_PERIOD_S},
        "groups": [
            {"name": "prefill", "role": "prefill", "count": n, **mode},
            {"name": "decode", "role": "decode", "count": n, **mode},
        ],
        "proxy": {} if untuned else tuned,
    }


@dataclass(frozen=True)
class Target:
    """What the rows reach: the control plane, the proxy, the proxy's registry port."""

    plane: Plane
    proxy_url: str
    registry_port: int
    tmp: Path
    prompts: int

    def instances(self) -> list[dict]:
        """The proxy's view (GET /admin/instances): url, role, group, healthy, ..."""
        headers = self.plane.admin_headers(NAME)
        status, raw = http_get(self.proxy_url + "/admin/instances", timeout=5, headers=headers)
        return json.loads(raw)["instances"] if status == 200 else []

    def unit_url(self, unit: str) -> str:
        return self.plane.units()[unit]["url"]

    def retries(self) -> float:
        """pdctl_proxy_retries_total over every leg and cause, from the proxy's /metrics."""
        return sum(self.counted("pdctl_proxy_retries_total").values())

    def counted(self, name: str) -> dict[str, float]:
        """One of the proxy's counters by its label set, from its /metrics ({} unreachable)."""
        try:
            status, raw = http_get(self.proxy_url + "/metrics", timeout=5)
        except OSError:
            return {}
        lines = raw.decode().splitlines() if status == 200 else []
        return {
            line[len(name) : line.rindex("}") + 1]: float(line.rsplit(" ", 1)[1])
            for line in lines
            if line.startswith(name + "{")
        }


def served(proxy_url: str) -> bool:
    try:
        status, _ = http_post(
            proxy_url + "/v1/completions",
            {"model": "tiny", "prompt": "a b c", "max_tokens": 2},
            timeout=5,
        )
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


def wait_for(predicate: Callable[[], object], limit: float, every: float = 0.1) -> float | None:
    """Seconds until `predicate()` is true, polled; None when it never is within `limit`."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        with contextlib.suppress(OSError, KeyError, ValueError):
            if predicate():
                return time.monotonic() - start
        time.sleep(every)
    return None


class Load:
    """`pdctl bench` in the background, every request kept (--save-requests)."""

    def __init__(
        self, tmp: Path, proxy_url: str, tag: str, prompts: int, timeout: float = CLIENT_TIMEOUT
    ) -> None:
        self.out, self.prompts, self.timeout = tmp / f"load-{tag}.json", prompts, timeout
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "pdctl.py"),
                "bench",
                "--base-url",
                proxy_url,
                "--model",
                "tiny",
                "--request-rate",
                str(RATE),
                "--num-prompts",
                str(prompts),
                "--input-len",
                "64",
                "--output-len",
                "16",
                "--result-json",
                str(self.out),
                "--save-requests",
                "--quiet",
                "--timeout",
                str(timeout),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def finish(self, row: Row) -> None:
        try:
            self.proc.wait(timeout=self.prompts / RATE + self.timeout + 60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        row.sent += self.prompts
        if not self.out.exists():
            row.lost += self.prompts
            said = self.proc.stderr.read() if self.proc.stderr else b""  # a pipe: always there
            row.notes.append("bench wrote no result: " + said.decode()[-200:])
            return
        judge(json.loads(self.out.read_text())["requests"], self.prompts, row)


def judge(requests: list[dict], prompts: int, row: Row) -> None:
    """Count each request as completed, failed with a clear error, or lost."""
    errors: dict[str, int] = {}
    for r in requests:
        error = r["error"] or ""
        if r["ok"]:
            row.completed += 1
            continue
        row.streaming += bool(r.get("ttft"))  # the client had its first token
        if (
            error
            and not error.startswith("timed out")
            and any(word in error for word in (*CLEAR, *row.also_clear))
        ):
            row.failed_clear += 1
            row.errors.append(r)
            why = error[error.find(" (not retried") :] if "(not retried" in error else ""
            said = error[:90] + why  # the reason a retry was refused is worth the length
            errors[said] = errors.get(said, 0) + 1
        else:  # no answer, or an error that does not say what failed: counts against the row
            row.lost += 1
            row.notes.append(f"unclear error: {error[:90] or 'none'}")
    row.lost += prompts - len(requests)
    row.notes += [f"{n}x {e}" for e, n in sorted(errors.items(), key=lambda x: -x[1])[:2]]


def refusals(before: dict[str, float], after: dict[str, float]) -> list[str]:
    """The retries the proxy refused during a row, by reason (a note each)."""
    notes = []
    for labels, value in sorted(after.items()):
        n = round(value - before.get(labels, 0.0))
        if n > 0:
            reason = labels.split('reason="', 1)[-1].split('"', 1)[0]
            notes.append(f"{n} retries refused ({reason})")
    return notes


def under_load(
    target: Target,
    row: Row,
    inject: Callable[[Row], None],
    prompts: int | None = None,
    client_timeout: float = CLIENT_TIMEOUT,
) -> Row:
    """Start the load, inject the fault mid-load, time the recovery, read every request."""
    tag = row.fault.replace(" ", "-")
    load = Load(target.tmp, target.proxy_url, tag, prompts or target.prompts, client_timeout)
    time.sleep(2.0)  # mid-load
    retried = target.retries()
    refused = target.counted(REFUSED)
    begin = time.monotonic()
    try:
        inject(row)
    finally:
        if row.recovery_s is None:
            row.recovery_s = recovered(target.plane, target.proxy_url, begin)
        load.finish(row)
        row.retried = round(target.retries() - retried)
        row.notes += refusals(refused, target.counted(REFUSED))
    row.check(row.lost == 0, "nothing lost")
    row.check(row.recovery_s is not None, "recovered")
    if not row.may_fail:
        row.check(row.failed_clear == 0, "no request failed")
    return row


def fault_on(url: str, body: dict | None) -> None:
    """Set (or, with None, clear) a stand-in's injected fault (simulator/config/faults.py)."""
    if body is None:
        request = urllib.request.Request(url + "/_fault", method="DELETE")
        with urllib.request.urlopen(request, timeout=5) as resp:
            status = resp.status
    else:
        status, _ = http_post(url + "/_fault", body, timeout=5)
    if status != 200:
        raise RuntimeError(f"{url}/_fault answered {status}")
