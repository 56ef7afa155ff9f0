"""A supervisor change that its caller's cancellation cannot cut in half."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("pdctl.supervisor")


async def run_whole(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to its end even if the caller is cancelled (a rollout aborted, or past its
    step's deadline), and only then let the cancellation through: a machine's transition and
    the actions it asks for are one (cut between, a process sits drained and never stopped,
    or STARTING with nothing spawned), and what the caller does next (an abort's undo, a
    rollback's own convergence) must find the work done, not racing it."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            log.error("a supervisor change cut short failed", exc_info=task.exception())
        raise
