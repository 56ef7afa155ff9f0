"""Chaos rows for a layout with spares (`make chaos LAYOUT=2p2d`): two prefills and two
decodes, so a dead, hung or misbehaving instance costs no request that had not started
streaming. The proxy retries such requests on the other instance (connector/retry.py) and
ejects the broken one at once (a refused connection, garbage, or every stream silent past
the first-byte deadline); only requests whose client already had a token may fail, and the
row checks exactly that (`streaming`, counted on the client's side).

The stand-ins run with --kv-stale-peer hang: a decode keeps a restarted prefill's old agent
and hangs each transfer through it for the KV transfer timeout, as released NIXL and MoRIIO
do; the controller restarts such a decode (controller/stale_peers.py). The row "a Ray node
removed" is benchmarks/chaos_ray.py's (a cluster of its own).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from benchmarks.chaos_faults import kill, routed, signal_unit, stop_decode
from benchmarks.chaos_load import (
    FIRST_BYTE_TIMEOUT,
    NAME,
    RATE,
    Row,
    Target,
    recovered,
    under_load,
    wait_for,
)
from benchmarks.chaos_upstream import misbehave
from controller.health import failed_transfers
from controller.stale_peers import StaleWatch
from harness.processes import http_get

SPARE = "the spare serves every request not yet streaming"
# A stale decode is found by its failures, so only while traffic flows: the restart row's load
# lasts through the prefill's restart and both decodes' detection (each needs two hangs,
# ejected between them, and the second waits while the first restarts), not only its start.
RESTART_LOAD_S = 48.0


def routable(target: Target, limit: float = 60.0) -> float | None:
    """Wait until the proxy routes to every instance (healthy, not drained or ejected)."""
    n = len(target.plane.units()) - 1

    def every() -> bool:
        return sum(routed(target, i["url"]) for i in target.instances()) == n

    return wait_for(every, limit, 0.2)


def stale_events(target: Target) -> list[str]:
    _, events = target.plane.api("GET", f"/events?deployment={NAME}&kind=stale_peer")
    return [e["message"] for e in events] if isinstance(events, list) else []


def _decode_failures(target: Target) -> dict[str, tuple[int | None, float | None]]:
    """Each decode's pid and failed KV transfers (its /metrics; None when unread)."""
    out: dict[str, tuple[int | None, float | None]] = {}
    for name, unit in target.plane.units().items():
        if not name.startswith("decode-"):
            continue
        try:
            status, raw = http_get(unit["url"] + "/metrics", timeout=2)
            count = failed_transfers(raw.decode()) if status == 200 else None
        except OSError:
            count = None
        out[name] = (unit.get("pid"), count)
    return out


def _wedged(before: dict, now: dict) -> list[str]:
    """Decodes still the process they were before the fault whose transfers failed as often
    as makes the controller call them stale (controller/stale_peers.py): left unrestarted."""
    limit = StaleWatch().failures
    return [
        name
        for name, (pid, count) in now.items()
        if name in before
        and pid == before[name][0]
        and None not in (count, before[name][1])
        and count - before[name][1] >= limit
    ]


def restart_prefill(target: Target) -> Row:
    """prefill-0 restarted (SIGKILL, the supervisor starts it again) under load; a decode
    that met the old prefill holds its agent and hangs on it until the controller restarts
    it. Which decodes met it depends on the routing, so the row asks that at least one was
    found stale and that none whose transfers kept failing was left running."""
    row = Row(
        "prefill restart under load",
        f"{SPARE}; each decode whose transfers fail on the stale agent restarted by the "
        "controller, one at a time",
    )

    def inject(row: Row) -> None:
        before = stale_events(target)
        failures = _decode_failures(target)
        pid = signal_unit(target, "prefill-0", signal.SIGKILL)
        begin = time.monotonic()
        back = wait_for(lambda: target.plane.units()["prefill-0"]["pid"] not in (None, pid), 30)
        row.check(back is not None, "prefill-0 restarted")

        def settled() -> bool:
            found = len(stale_events(target)) > len(before)
            return found and not _wedged(failures, _decode_failures(target))

        told = wait_for(settled, 40, 0.5)
        news = stale_events(target)[: len(stale_events(target)) - len(before)]
        row.notes += [n.split(": restarting: ")[0] + " restarted (stale agent)" for n in news]
        row.check(bool(news), f"a stale agent found ({len(news)} events)")
        wedged = _wedged(failures, _decode_failures(target))
        row.check(told is not None and not wedged, f"no stale decode left running {wedged}")
        row.recovery_s = recovered(target.plane, target.proxy_url, begin)

    prompts = max(target.prompts * 3, int(RATE * RESTART_LOAD_S))
    return under_load(target, row, inject, prompts=prompts)


def _expect(row: Row, expected: str) -> Row:
    row.expected = expected
    return row


def _stall(target: Target, after: int) -> Row:
    return misbehave(
        target,
        "decode-0",
        "stall",
        after,
        f"{SPARE}; silent on every stream past {FIRST_BYTE_TIMEOUT:g} s: ejected",
    )


ROWS: dict[str, Callable[[Target], Row]] = {
    "SIGKILL decode": lambda t: kill(t, "decode-0", expected=f"{SPARE}; restarted"),
    "SIGKILL prefill": lambda t: kill(t, "prefill-0", expected=f"{SPARE}; restarted"),
    "SIGSTOP decode": lambda t: _expect(
        stop_decode(t, 12),
        f"{SPARE}; silent past {FIRST_BYTE_TIMEOUT:g} s: ejected; replaced by the supervisor",
    ),
    "decode garbage at once": lambda t: misbehave(
        t, "decode-0", "garbage", 0, f"{SPARE}; garbage ejects it at once"
    ),
    "decode garbage mid-stream": lambda t: misbehave(
        t, "decode-0", "garbage", 2, "error event naming the decode; ejected at once"
    ),
    "decode stall at once": lambda t: _stall(t, 0),
    "decode stall mid-stream": lambda t: _stall(t, 3),
    "prefill restart under load": restart_prefill,
}
QUICK = (
    "SIGKILL decode",
    "SIGKILL prefill",
    "SIGSTOP decode",
    "decode garbage at once",
    "decode stall at once",
    "prefill restart under load",
)
