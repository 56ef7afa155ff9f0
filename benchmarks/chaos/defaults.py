"""Chaos rows for two prefills and two decodes behind a proxy with its defaults (`make chaos
LAYOUT=2p2d-defaults`, NIXL stand-ins): no timeout tuned for the faults, as an operator who
set nothing runs it (issue 39 item 3). A hung instance must still cost no request that had not
started streaming: the proxy's first-byte deadline is on by default (10 s,
connector/settings/fields.py) for prefill and decode legs alike, and its retry budget saves enough
for a spare to take the hung one's share (connector/legs/retry.py). Each row sends 240
requests over a minute, with the 30 s client timeout of the probe that found the gap; the
campaign checks that only requests already streaming failed.

The supervisor replaces a stopped instance after about three failed /health probes; whichever
comes first, its kill (the legs reset and are retried) or the proxy's deadline (the legs are
left and retried, the instance ejected), the spare serves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

from benchmarks.chaos.faults import signal_unit
from benchmarks.chaos.load import Row, Target, under_load, wait_for
from benchmarks.chaos.spares import routable
from connector.settings import FIRST_BYTE_TIMEOUT_S

PROMPTS = 240
CLIENT_TIMEOUT_S = 30.0
SPARE = "the spare serves every request not yet streaming, with the proxy's defaults"


def _replaced(target: Target, unit: str, pid: int) -> bool:
    state = target.plane.units()[unit]
    return state["pid"] not in (None, pid) and state["state"] == "RUNNING"


def _settled(target: Target) -> bool:
    units = target.plane.units()
    running = all(u["state"] == "RUNNING" and u["pid"] for u in units.values())
    return running and routable(target, 0.1) is not None


def hang(target: Target, stopped: tuple[str, ...], killed: tuple[str, ...] = ()) -> Row:
    """SIGSTOP `stopped` (and SIGKILL `killed`) at once, mid-load; each replaced by the
    supervisor; the old stopped process let go at the end (SIGCONT)."""
    name = " + ".join(
        [f"SIGSTOP {u.split('-')[0]}" for u in stopped]
        + [f"SIGKILL {u.split('-')[0]}" for u in killed]
    )
    row = Row(
        name,
        f"{SPARE}: a hung instance found within {FIRST_BYTE_TIMEOUT_S:g} s or killed by the "
        "supervisor first; replaced",
    )

    settled = wait_for(lambda: _settled(target), 180, 0.5)  # the last row's restarts over
    if settled is None:
        row.check(False, f"every unit running and routed before the fault: {target.plane.units()}")
        return row

    def inject(row: Row) -> None:
        pids = {u: signal_unit(target, u, signal.SIGSTOP) for u in stopped}
        pids |= {u: signal_unit(target, u, signal.SIGKILL) for u in killed}
        took = wait_for(lambda: all(_replaced(target, u, p) for u, p in pids.items()), 90, 0.2)
        if row.check(took is not None, f"{', '.join(pids)} replaced"):
            row.notes.append(f"replaced after {took:.1f} s")
        for unit in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids[unit], signal.SIGCONT)
        time.sleep(1.0)

    return under_load(target, row, inject, prompts=PROMPTS, client_timeout=CLIENT_TIMEOUT_S)


ROWS: dict[str, Callable[[Target], Row]] = {
    "SIGSTOP decode + SIGKILL prefill": lambda t: hang(t, ("decode-0",), ("prefill-0",)),
    "SIGSTOP prefill": lambda t: hang(t, ("prefill-0",)),
    "SIGSTOP decode": lambda t: hang(t, ("decode-0",)),
}
QUICK = tuple(ROWS)
