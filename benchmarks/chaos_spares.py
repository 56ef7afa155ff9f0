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
    Row,
    Target,
    recovered,
    under_load,
    wait_for,
)
from benchmarks.chaos_upstream import misbehave

SPARE = "the spare serves every request not yet streaming"


def routable(target: Target, limit: float = 60.0) -> float | None:
    """Wait until the proxy routes to every instance (healthy, not drained or ejected)."""
    n = len(target.plane.units()) - 1

    def every() -> bool:
        return sum(routed(target, i["url"]) for i in target.instances()) == n

    return wait_for(every, limit, 0.2)


def stale_events(target: Target) -> list[str]:
    _, events = target.plane.api("GET", f"/events?deployment={NAME}&kind=stale_peer")
    return [e["message"] for e in events] if isinstance(events, list) else []


def restart_prefill(target: Target) -> Row:
    """prefill-0 restarted (SIGKILL, the supervisor starts it again) under load; each decode
    then holds its old agent and hangs on it until the controller restarts that decode."""
    row = Row(
        "prefill restart under load",
        f"{SPARE}; each stale decode restarted by the controller, one at a time",
    )

    def inject(row: Row) -> None:
        before = stale_events(target)
        pid = signal_unit(target, "prefill-0", signal.SIGKILL)
        begin = time.monotonic()
        back = wait_for(lambda: target.plane.units()["prefill-0"]["pid"] not in (None, pid), 30)
        row.check(back is not None, "prefill-0 restarted")
        decodes = [u for u in target.plane.units() if u.startswith("decode-")]
        told = wait_for(lambda: len(stale_events(target)) - len(before) >= len(decodes), 40, 0.3)
        news = stale_events(target)[: len(stale_events(target)) - len(before)]
        row.notes += [n.split(": restarting: ")[0] + " restarted (stale agent)" for n in news]
        row.check(told is not None, f"every decode's stale agent found ({len(news)} events)")
        row.recovery_s = recovered(target.plane, target.proxy_url, begin)

    return under_load(target, row, inject, prompts=target.prompts * 3)


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
