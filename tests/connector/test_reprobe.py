"""A request that finds no routable instance asks the instances marked down once more before a
503 (connector/membership.py reprobe_down): a process that came up since its last probe serves
it; one still down costs the request one short probe; requests at once share one round."""

from __future__ import annotations

import time

from tests.connector.fakes import FakeEngine, completion, engines, run, running, settings_for
from tests.connector.test_proxy import post


def test_an_instance_that_came_up_since_its_last_probe_serves_instead_of_a_503():
    async def body():
        p, d = FakeEngine("p"), FakeEngine("d")
        async with (
            engines(p, d),
            running(settings_for([p], [d], health_interval=60.0)) as (base, proxy),
        ):
            inst = proxy.pool.get(d.url)
            proxy.pool.set_health(inst, False, "refused")  # as a refused leg leaves it
            status, _, raw = await post(base, completion(stream=False))
            return status, raw, inst.healthy

    status, raw, healthy = run(body())
    assert status == 200, raw
    assert healthy


def test_an_instance_still_down_gets_its_503_after_one_short_probe_shared_by_requests():
    async def body():
        gone = FakeEngine("d")
        await gone.start()
        await gone.stop()  # its port refuses from now on
        async with (
            engines(FakeEngine("p")) as (p,),
            running(settings_for([p], [gone], health_interval=60.0)) as (base, proxy),
        ):
            inst = proxy.pool.get(gone.url)
            proxy.pool.set_health(inst, False, "refused")
            start = time.monotonic()
            first = await post(base, completion(stream=False))
            second = await post(base, completion(stream=False))  # within the gap: no round
            return first, second, time.monotonic() - start, inst.probes_failed

    first, second, seconds, probes_failed = run(body())
    for status, _, raw in (first, second):
        assert status == 503 and b"no available decode instance" in raw, raw
    assert seconds < 1.5
    assert probes_failed == 1  # one round for both requests
