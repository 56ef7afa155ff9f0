"""Chaos rows for a layout with spares (`make chaos LAYOUT=2p2d`): two prefills and two
decodes, so a dead, hung or misbehaving instance costs no request that had not started
streaming. The proxy retries such requests on the other instance (connector/legs/retry.py) and
ejects the broken one at once (a refused connection, garbage, or every stream silent past
the first-byte deadline); only requests whose client already had a token may fail, and the
row checks exactly that (`streaming`, counted on the client's side).

The stand-ins run with --kv-stale-peer hang: a decode keeps a restarted prefill's old agent
and hangs each transfer through it for the KV transfer timeout, as released NIXL and MoRIIO
do; the controller checks each decode's hand-off with a restarted prefill at once and restarts
a stale one (controller/clients/pair_check.py, controller/supervise/stale_peers.py). The row "a Ray
node
removed" is benchmarks/chaos/ray.py's (a cluster of its own).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from benchmarks.chaos.faults import kill, routed, signal_unit, stop_decode
from benchmarks.chaos.load import (
    FIRST_BYTE_TIMEOUT,
    NAME,
    RATE,
    Row,
    Target,
    recovered,
    under_load,
    wait_for,
)
from benchmarks.chaos.upstream import misbehave
from domain.canary_marks import HEADER, PAIR_HEADER
from harness.processes import http_post

SPARE = "the spare serves every request not yet streaming"
# The restart row's load lasts through the prefill's restart and both decodes' restarts (the
# second waits while the first restarts), not only its start.
RESTART_LOAD_S = 30.0


def routable(target: Target, limit: float = 60.0) -> float | None:
    """Wait until the proxy routes to every instance (healthy, not drained or ejected)."""
    n = len(target.plane.units()) - 1

    def every() -> bool:
        return sum(routed(target, i["url"]) for i in target.instances()) == n

    return wait_for(every, limit, 0.2)


def stale_events(target: Target) -> list[str]:
    _, events = target.plane.api("GET", f"/events?deployment={NAME}&kind=stale_peer")
    return [e["message"] for e in events] if isinstance(events, list) else []


def _meet(target: Target, prefill: str, decode: str) -> bool:
    """One request served by exactly this pair (a canary pinned to it, as the controller's
    pair check sends): the decode now holds the prefill's agent."""
    token = target.plane.admin_headers(NAME)["Authorization"].split(" ", 1)[1]
    pin = f"{_listed(target, prefill)} {_listed(target, decode)}"
    body = {"model": "tiny", "prompt": "meet", "max_tokens": 2, "stream": False}
    headers = {HEADER: token, PAIR_HEADER: pin}
    status, _ = http_post(target.proxy_url + "/v1/completions", body, 30, headers)
    return status == 200


def _listed(target: Target, unit: str) -> str:
    """The URL the proxy knows `unit` by."""
    port = urlsplit(target.unit_url(unit)).port
    return next(i["url"] for i in target.instances() if urlsplit(i["url"]).port == port)


def restart_prefill(target: Target) -> Row:
    """prefill-0 restarted (SIGKILL, the supervisor starts it again) under load, after every
    decode met it: each holds its old agent and would hang on it. The routing alone may never
    pair the new prefill with some decode (the prefill and the decode are picked each in its
    own turn), so the controller checks each pair at once (controller/clients/pair_check.py) and
    restarts every stale decode, one at a time, while the spares serve."""
    row = Row(
        "prefill restart under load",
        f"{SPARE}; every decode that met the old prefill found stale by a pair check and "
        "restarted by the controller, one at a time",
    )
    decodes = sorted(n for n in target.plane.units() if n.startswith("decode-"))

    def inject(row: Row) -> None:
        met = [d for d in decodes if _meet(target, "prefill-0", d)]
        row.check(met == decodes, f"every decode met prefill-0 first ({met})")
        before = stale_events(target)
        pids = {d: target.plane.units()[d]["pid"] for d in decodes}
        pid = signal_unit(target, "prefill-0", signal.SIGKILL)
        begin = time.monotonic()
        back = wait_for(lambda: target.plane.units()["prefill-0"]["pid"] not in (None, pid), 30)
        row.check(back is not None, "prefill-0 restarted")

        def news() -> list[str]:
            return stale_events(target)[: len(stale_events(target)) - len(before)]

        def settled() -> bool:
            units = target.plane.units()
            fresh = all(units[d]["pid"] not in (None, pids[d]) for d in decodes)
            return fresh and len(news()) >= len(decodes) and routable(target, 0.1) is not None

        took = wait_for(settled, 60, 0.5)
        found = news()
        row.notes += [n.split(": restarting: ")[0] + " restarted (stale agent)" for n in found]
        if took is not None:
            took_s = time.monotonic() - begin
            row.notes.append(f"every decode restarted and routed {took_s:.1f} s after the kill")
        named = {n.split(": restarting")[0].split("/")[-1] for n in found}
        row.check(named >= set(decodes), f"each decode found stale ({sorted(named)})")
        by_check = [n for n in found if "pinned to the restarted" in n]
        row.check(
            len(by_check) == len(found),
            f"found by the pair check ({len(by_check)} of {len(found)})",
        )
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
