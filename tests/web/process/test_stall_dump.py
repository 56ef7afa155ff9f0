"""Stacks in the serve's log when it stops answering (web/process/stall_dump.py): on SIGUSR1, and by
themselves when the event loop stalls."""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import time
from pathlib import Path

from web.process import stall_dump


def test_a_stalled_loop_writes_every_threads_stack_and_a_live_one_writes_none(tmp_path: Path):
    log = tmp_path / "serve.log"

    async def body(block_s: float) -> None:
        with log.open("w") as out:
            async with stall_dump.watching(stall_s=0.4, out=out):
                await asyncio.sleep(0.9)  # the loop runs: nothing is written
                assert log.read_text() == ""
                time.sleep(block_s)  # the loop stalls (a blocking call on it)
                await asyncio.sleep(0)

    asyncio.run(body(1.0))
    text = log.read_text()
    assert "Timeout (0:00:00.4" in text and "most recent call first" in text
    assert "test_stall_dump.py" in text  # the blocking frame is named


def test_sigusr1_writes_every_threads_stack_and_the_process_goes_on(tmp_path: Path):
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        stall_dump.on_signal(out)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.1)
        finally:
            faulthandler.unregister(signal.SIGUSR1)
    text = log.read_text()
    assert "Current thread" in text and "test_stall_dump.py" in text
