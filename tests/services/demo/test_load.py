"""The demo pair's load loop (services/demo/load.py) against the bench's fake engine: it offers
requests while the deployment is wholly RUNNING, none while it is not, caps what is in flight,
and ends with close()."""

from __future__ import annotations

import asyncio
import gc

from services.demo.load import DemoLoad, Offer, ready
from tests.bench.sse_server import FakeEngine, serving

RUNNING = [{"name": "proxy", "state": "RUNNING"}, {"name": "engine-0", "state": "RUNNING"}]
STOPPED = [{"name": "proxy", "state": "STOPPED"}, {"name": "engine-0", "state": "STOPPED"}]


def test_ready_means_every_process_running():
    assert ready(RUNNING) and not ready(STOPPED) and not ready([])
    assert not ready([RUNNING[0], {"name": "engine-0", "state": "STARTING"}])


def run(states: list, seconds: float, offer: Offer, engine: FakeEngine) -> DemoLoad:
    async def go() -> DemoLoad:
        unhandled: list[dict] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: unhandled.append(ctx))
        async with serving(engine) as url:
            load = DemoLoad(offer, lambda name: states, lambda name: url)
            load.start("pair")
            await asyncio.sleep(seconds)
            await load.close()
        gc.collect()  # a task whose exception nobody took says so when collected
        assert unhandled == []
        return load

    return asyncio.run(go())


def test_offers_load_while_running():
    engine = FakeEngine(token_delay=0.001)
    load = run(RUNNING, 1.0, Offer(rate=20.0, input_len=16, output_len=4), engine)
    assert load.sent["pair"] >= 5 and engine.payloads  # Poisson at 20/s for a second
    assert all(p["max_tokens"] == 4 and p["stream"] for p in engine.payloads)


def test_offers_nothing_while_not_running():
    engine = FakeEngine()
    load = run(STOPPED, 1.5, Offer(rate=20.0, input_len=16, output_len=4), engine)
    assert load.sent["pair"] == 0 and engine.payloads == []


def test_arrivals_past_the_cap_are_skipped_not_queued_and_cancelled_at_close():
    engine = FakeEngine(first_token_delay=5.0)  # nothing finishes during the test
    offer = Offer(rate=50.0, input_len=16, output_len=4, max_in_flight=3)
    load = run(RUNNING, 1.0, offer, engine)
    assert load.sent["pair"] == 3 and load.skipped["pair"] > 10
