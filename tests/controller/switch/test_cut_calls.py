"""A rollout step cut short (aborted, or past its deadline) while its call to the proxy is in
flight: the proxy may have acted on it, so undo() puts back what it may have done."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from controller.switch.plan import Step, StepKind
from controller.switch.steps import Execution
from tests.controller.fakes import FakeClock

URL = "http://127.0.0.1:8101"


class Fleet:
    def __init__(self) -> None:
        self.deployments = {"d": object()}

    def status(self, name: str) -> list[dict[str, Any]]:
        return [{"name": "decode-0", "state": "RUNNING", "url": URL, "role": "decode"}]


class Proxy:
    """Acts on each call at once; the answer to `slow` never comes back."""

    def __init__(self, slow: str) -> None:
        self.slow = slow
        self.paused: set[str] = set()
        self.drained: set[str] = set()
        self.whole: set[str] = set()
        self.acted = asyncio.Event()

    async def _answer(self, call: str) -> bool:
        if call == self.slow:
            self.acted.set()
            await asyncio.Event().wait()
        return True

    async def pause(self, group: str) -> None:
        self.paused.add(group)
        await self._answer("pause")

    async def resume(self, group: str) -> None:
        self.paused.discard(group)

    async def drain(self, url: str) -> bool:
        self.drained.add(url)
        return await self._answer("drain")

    async def undrain(self, url: str) -> bool:
        self.drained.discard(url)
        return True

    async def set_whole(self, url: str, whole: bool) -> bool:
        if not whole:
            self.whole.discard(url)
            return True
        self.whole.add(url)
        return await self._answer("whole")


STEPS = {
    "pause": Step(StepKind.PAUSE, mode="read"),
    "drain": Step(StepKind.DRAIN, ("decode-0",)),
    "whole": Step(StepKind.WHOLE_ON, ("decode-0",)),
}


@pytest.mark.parametrize("call", sorted(STEPS))
def test_a_call_cut_short_after_the_proxy_acted_is_undone(call: str) -> None:
    async def scenario() -> Proxy:
        proxy = Proxy(call)
        run = Execution(Fleet(), proxy, FakeClock(), "d")  # type: ignore[arg-type]
        step = asyncio.create_task(run.do(STEPS[call]))
        await proxy.acted.wait()
        step.cancel()  # the rollout is aborted while the answer is on its way
        await asyncio.gather(step, return_exceptions=True)
        assert await asyncio.wait_for(run.undo(), 5) == []
        return proxy

    proxy = asyncio.run(scenario())
    assert not proxy.paused and not proxy.drained and not proxy.whole
