"""Chaos rows where an instance stays up and answers wrongly (fault injection in the stand-in,
simulator/config/faults.py): 200 with garbage, or a stream that stalls. The client must get an error
naming the leg and the instance: never the garbage, never a hang past the proxy's timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from benchmarks.chaos.faults import answered_within
from benchmarks.chaos.load import (
    DECODE_TIMEOUT,
    PREFILL_TIMEOUT,
    Row,
    Target,
    fault_on,
    under_load,
)

HOLD_S = 3.0  # how long the fault lasts


def misbehave(target: Target, unit: str, fault: str, after_tokens: int, expected: str) -> Row:
    leg = unit.split("-")[0]
    where = "mid-stream" if after_tokens else "at once"
    row = Row(f"{leg} {'200 + garbage' if fault == 'garbage' else 'stalls'} {where}", expected)

    def inject(row: Row) -> None:
        url = target.unit_url(unit)
        fault_on(url, {"fault": fault, "after_tokens": after_tokens})
        try:
            time.sleep(HOLD_S)
        finally:
            fault_on(url, None)
        row.notes.append(f"fault held {HOLD_S:g} s")

    row = under_load(target, row, inject)
    row.check(row.failed_clear + row.retried > 0, "the fault was met (failed or retried)")
    named = all(f"{leg} leg to" in r["error"] for r in row.errors)
    row.check(named, f"every error names the {leg} leg and its instance")
    if fault == "stall":
        answered_within(row, (PREFILL_TIMEOUT if leg == "prefill" else DECODE_TIMEOUT) + 3)
    return row


ROWS: dict[str, Callable[[Target], Row]] = {
    "decode garbage": lambda t: misbehave(
        t, "decode-0", "garbage", 2, "error event naming the decode; garbage not passed on"
    ),
    "prefill garbage": lambda t: misbehave(t, "prefill-0", "garbage", 0, "502 naming the prefill"),
    "decode stall": lambda t: misbehave(
        t, "decode-0", "stall", 3, f"error event after {DECODE_TIMEOUT:g} s of silence"
    ),
    "prefill stall": lambda t: misbehave(
        t, "prefill-0", "stall", 0, "502 naming the prefill within its timeout"
    ),
}
