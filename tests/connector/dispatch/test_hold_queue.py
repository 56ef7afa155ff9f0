"""The hold queue (connector/dispatch/hold.py) over a fake pool: a request that arrives in the
startup
grace while a group is paused (a mode switch begun right after the proxy started) keeps its
hold deadline past the grace, as the Ray CI run showed it must; one that finds nothing paused
when the grace ends gets the grace's answer, and a full queue refuses at once."""

from __future__ import annotations

import asyncio

import pytest

from connector.dispatch.hold import HoldQueue
from connector.errors import HoldRejected, NoInstance
from connector.measure.metrics import ProxyMetrics
from tests.connector.fakes import settings_for

ROUTE = object()


class Pool:
    def __init__(self, paused: bool) -> None:
        self.paused, self.routable = paused, False

    def route(self):
        return ROUTE if self.routable else None

    def any_paused(self) -> bool:
        return self.paused

    def why_unroutable(self) -> str:
        return "nothing registered"


def queue(pool: Pool, **settings) -> HoldQueue:
    s = settings_for(**{"registry_port": 0, "startup_grace": 0.2, "hold_deadline": 5.0, **settings})
    hold = HoldQueue(s, pool, ProxyMetrics())
    hold.start()
    return hold


def test_a_pause_that_outlasts_the_startup_grace_keeps_the_request_held_until_it_ends():
    async def body():
        pool = Pool(paused=True)
        hold = queue(pool)
        waiting = asyncio.create_task(hold.acquire_route())
        await asyncio.sleep(0.6)  # the grace (0.2 s) is over; the switch still holds
        assert not waiting.done(), waiting
        pool.paused, pool.routable = False, True  # the switch resumes dispatch
        hold.notify()
        assert await asyncio.wait_for(waiting, 2) is ROUTE

    asyncio.run(body())


def test_a_pause_past_the_hold_deadline_says_so():
    async def body():
        hold = queue(Pool(paused=True), hold_deadline=0.5)
        with pytest.raises(HoldRejected) as caught:
            await asyncio.wait_for(hold.acquire_route(), 3)
        assert "paused past the hold deadline (0.5 s)" in caught.value.message

    asyncio.run(body())


def test_nothing_routable_when_the_grace_ends_and_nothing_paused_is_no_instance():
    async def body():
        hold = queue(Pool(paused=False))
        with pytest.raises(NoInstance) as caught:
            await asyncio.wait_for(hold.acquire_route(), 3)
        assert "nothing registered" in caught.value.message

    asyncio.run(body())


def test_a_full_hold_queue_refuses_at_once_in_the_grace():
    async def body():
        hold = queue(Pool(paused=True), hold_queue=1)
        first = asyncio.create_task(hold.acquire_route())
        await asyncio.sleep(0.05)
        with pytest.raises(HoldRejected) as caught:
            await asyncio.wait_for(hold.acquire_route(), 0.1)
        assert "hold queue is full (1 requests)" in caught.value.message
        first.cancel()

    asyncio.run(body())
