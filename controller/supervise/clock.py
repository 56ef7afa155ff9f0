"""The supervisor's clock: monotonic time for the machines, wall time for uptimes, and sleep;
tests pass a fake they advance by hand."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...  # monotonic seconds, for the machines

    def wall(self) -> float: ...  # epoch seconds, for uptimes across restarts of pdctl

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
