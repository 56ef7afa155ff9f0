"""The chaos row for KV corruption on the wire: the prefill flips a byte of every KV payload it
sends (simulator/config/faults.py corrupt_kv), so the decode answers 200 with wrong tokens, which no
status code, retry or SLO figure notices. The correctness canary must (observe/canary/state.py):
a mismatch on /metrics and one canary.mismatch event within one canary period, and no request
lost (every wrong answer is still an answer: the canary is the one that says it was wrong).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from benchmarks.chaos.load import CANARY_PERIOD_S, NAME, Row, Target, fault_on, under_load
from harness.processes import http_get, metric_value

SLACK_S = 2.0  # one probe's round trip and the confirming colocated answer


def mismatches(target: Target) -> float:
    _, raw = http_get(target.plane.server.url + "/metrics", timeout=5)
    return metric_value(
        raw.decode(), "pdctl_canary_checks_total", deployment=NAME, result="mismatch"
    )


def events(target: Target) -> list[dict]:
    _, found = target.plane.api("GET", f"/events?deployment={NAME}&limit=50")
    return [e for e in found if e["kind"] == "canary.mismatch"]


def corrupt_kv(target: Target) -> Row:
    row = Row(
        "KV corrupted on the wire",
        f"canary mismatch within one period ({CANARY_PERIOD_S:g} s); every request answered",
        may_fail=False,
    )
    before, seen = mismatches(target), len(events(target))

    def inject(row: Row) -> None:
        url = target.unit_url("prefill-0")
        fault_on(url, {"fault": "corrupt_kv"})
        began = time.monotonic()
        try:
            deadline = began + CANARY_PERIOD_S + SLACK_S + 5
            while time.monotonic() < deadline and mismatches(target) <= before:
                time.sleep(0.2)
            detected = time.monotonic() - began
        finally:
            fault_on(url, None)
        caught = mismatches(target) > before
        row.notes.append(f"detected after {detected:.1f} s" if caught else "never detected")
        row.check(caught and detected <= CANARY_PERIOD_S + SLACK_S, "detected in one period")
        deadline = time.monotonic() + 5  # the observer writes events at its next tick
        while len(found := events(target)) <= seen and time.monotonic() < deadline:
            time.sleep(0.2)
        fresh = found[: len(found) - seen]  # newest first
        row.check(len(fresh) == 1, "one canary.mismatch event")
        row.check(bool(fresh) and url in fresh[0]["message"], "the event names the pair")

    return under_load(target, row, inject)


ROWS: dict[str, Callable[[Target], Row]] = {"KV corrupted on the wire": corrupt_kv}
