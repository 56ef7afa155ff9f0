"""Stacks in the log when `pdctl serve` stops answering: every thread's, on SIGUSR1 (`kill
-USR1 <pid>`), and by themselves when the event loop makes no progress for `stall_s`.

A request that hangs for tens of seconds while others are answered (seen under real vLLM on a
loaded 2-core host) leaves nothing in a log by itself; the stacks say what the loop, or the
thread pool's workers, were waiting on.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import signal
import sys
from collections.abc import AsyncIterator
from typing import TextIO

STALL_S = 10.0  # the loop silent this long: its stacks are written once, then again per stall
REARM_S = 1.0


def on_signal(out: TextIO = sys.stderr) -> None:
    """SIGUSR1 writes every thread's stack to `out` (the serve's log), and the process goes on."""
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)


async def watch_loop(stall_s: float = STALL_S, out: TextIO = sys.stderr) -> None:
    """Run on the loop: re-arms a dump `stall_s` ahead every REARM_S, so one fires only when
    the loop went that long without running this task. Cancel to stop."""
    try:
        while True:
            faulthandler.dump_traceback_later(stall_s, repeat=False, file=out)
            await asyncio.sleep(min(REARM_S, stall_s / 2))
    finally:
        faulthandler.cancel_dump_traceback_later()


@contextlib.asynccontextmanager
async def watching(
    stall_s: float = STALL_S, out: TextIO = sys.stderr
) -> AsyncIterator[asyncio.Task[None]]:
    """The stall watch for the life of an `async with` block."""
    task = asyncio.create_task(watch_loop(stall_s, out))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
