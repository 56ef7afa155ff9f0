"""The hub: bounded queues that drop the oldest chart frame, never a blocked producer."""

from __future__ import annotations

import asyncio
import json
import time

from state.hub import Hub


def test_a_full_queue_drops_the_oldest_frame_and_keeps_events() -> None:
    async def scenario() -> list[str]:
        hub = Hub(queue_size=3)
        sub = hub.subscribe(["t"])
        hub.publish("t", {"n": 1})
        hub.publish("t", {"event": 1}, droppable=False)
        for n in range(2, 6):
            hub.publish("t", {"n": n})
        assert sub.dropped == 3
        return [await sub.get() for _ in range(sub.pending())]

    got = [json.loads(m) for m in asyncio.run(scenario())]
    assert got == [{"event": 1}, {"n": 4}, {"n": 5}]


def test_only_subscribers_of_a_topic_receive_it_and_unsubscribing_stops_delivery() -> None:
    hub = Hub()
    a, b = hub.subscribe(["frame:x", "event:x"]), hub.subscribe(["frame:y"])
    assert hub.publish("frame:x", {"k": 1}) == 1 and hub.publish("event:x", "{}") == 1
    assert a.pending() == 2 and b.pending() == 0
    assert hub.subscribers() == 2 and hub.subscribers("frame:y") == 1
    a.close()
    assert hub.publish("frame:x", {"k": 2}) == 0 and hub.subscribers() == 1


def test_a_slow_subscriber_never_delays_a_fast_one() -> None:
    async def scenario() -> tuple[list[float], int, float]:
        hub = Hub(queue_size=4)
        fast, slow = hub.subscribe(["t"]), hub.subscribe(["t"])
        lags: list[float] = []

        async def fast_reader() -> None:
            for _ in range(50):
                sent = json.loads(await fast.get())["sent"]
                lags.append(time.perf_counter() - sent)

        async def slow_reader() -> None:
            while True:
                await slow.get()
                await asyncio.sleep(0.2)  # a client on a bad link

        readers = [asyncio.create_task(fast_reader()), asyncio.create_task(slow_reader())]
        worst_publish = 0.0
        for _ in range(50):
            t0 = time.perf_counter()
            hub.publish("t", {"sent": t0})
            worst_publish = max(worst_publish, time.perf_counter() - t0)
            await asyncio.sleep(0.01)
        await asyncio.wait_for(readers[0], 5)
        readers[1].cancel()
        return lags, slow.dropped, worst_publish

    lags, dropped, worst_publish = asyncio.run(scenario())
    assert len(lags) == 50 and max(lags) < 0.05  # every frame, promptly
    assert dropped > 30  # the slow one lost stale frames instead
    assert worst_publish < 0.01


def test_a_publish_from_another_thread_wakes_a_subscriber_on_the_bound_loop() -> None:
    async def scenario() -> str:
        hub = Hub()
        hub.bind(asyncio.get_running_loop())
        sub = hub.subscribe(["event:x"])
        # As the store publishes from FastAPI's thread pool: handed to the loop, not offered
        # from the worker thread (asyncio.Event is not thread-safe).
        await asyncio.to_thread(hub.publish_threadsafe, "event:x", {"kind": "k"}, False)
        return await asyncio.wait_for(sub.get(), timeout=5)

    assert json.loads(asyncio.run(scenario())) == {"kind": "k"}


def test_a_publish_on_the_loop_itself_is_delivered_at_once() -> None:
    async def scenario() -> int:
        hub = Hub()
        hub.bind(asyncio.get_running_loop())
        sub = hub.subscribe(["event:x"])
        hub.publish_threadsafe("event:x", "{}")
        return sub.pending()

    assert asyncio.run(scenario()) == 1
