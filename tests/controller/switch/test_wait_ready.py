"""A wait for readiness ends at once when a process it waits for gave up (FATAL), naming it:
waiting out the deadline (minutes) could not change anything."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from controller.switch.plan import Step, StepKind
from controller.switch.steps import Execution, GaveUp, Timeouts
from tests.controller.fakes import FakeClock


class Fleet:
    def __init__(self, state: str) -> None:
        self.state = state

    def status(self, name: str) -> list[dict[str, Any]]:
        return [{"name": "decode-0", "state": self.state, "url": "http://d", "role": "decode"}]


class Admin:
    async def instances(self) -> list[dict[str, Any]]:
        return []


def test_a_fatal_process_ends_the_wait_naming_it() -> None:
    run = Execution(Fleet("FATAL"), Admin(), FakeClock(), "d", Timeouts(ready_s=600))  # type: ignore[arg-type]
    with pytest.raises(GaveUp, match=r"decode-0 gave up starting \(FATAL\)"):
        asyncio.run(run.do(Step(StepKind.WAIT_READY, ("decode-0",))))


def test_a_starting_process_is_waited_for_until_the_deadline() -> None:
    run = Execution(Fleet("STARTING"), Admin(), FakeClock(), "d", Timeouts(ready_s=1))  # type: ignore[arg-type]
    with pytest.raises(TimeoutError, match="decode-0"):
        asyncio.run(run.do(Step(StepKind.WAIT_READY, ("decode-0",))))
