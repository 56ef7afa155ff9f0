"""Outlier ejection: an instance whose legs keep failing while its /health still answers
stops getting requests for a while, unless it is the last of its role."""

import time

import pytest

from connector.pool.instances import Instance, InstancePool
from connector.pool.policy import RoundRobin
from tests.connector.fakes import (
    FakeEngine,
    completion,
    engines,
    refused_at,
    run,
    running,
    settings_for,
)
from tests.connector.test_proxy import post


def pool_with(*decodes: str) -> tuple[InstancePool, list[Instance]]:
    pool = InstancePool(RoundRobin())
    pool.upsert("http://p", "prefill", "read")
    return pool, [pool.upsert(url, "decode", "read") for url in decodes]


def test_three_failed_legs_in_a_row_eject_for_a_while_then_the_instance_returns():
    pool, (bad, good) = pool_with("http://d1", "http://d2")
    now = time.monotonic()
    assert not pool.leg_failed(bad, 3, 10.0, now)
    assert not pool.leg_failed(bad, 3, 10.0, now)
    assert pool.leg_failed(bad, 3, 10.0, now)
    assert not bad.available and good.available
    assert "ejected for 10 s after 3 failed requests in a row" in bad.last_error
    assert {pool.route().decode.url for _ in range(4)} == {"http://d2"}
    bad.ejected_until = now - 1  # its time is up
    assert bad.available and bad.describe()["ejections"] == 1


def test_an_instance_that_went_down_and_came_back_is_judged_afresh():
    pool, (bad, _) = pool_with("http://d1", "http://d2")
    for _ in range(3):
        pool.leg_failed(bad, 3, 10.0, time.monotonic())
    assert not bad.available
    pool.set_health(bad, False, "/health: ClientConnectorError")
    pool.set_health(bad, True)
    assert bad.available and bad.ejections == 0


def test_ejections_in_a_row_double_and_a_success_resets_the_count():
    pool, (bad, _) = pool_with("http://d1", "http://d2")
    now = time.monotonic()
    for expected in (10, 20, 40):
        for _ in range(3):
            pool.leg_failed(bad, 3, 10.0, now)
        assert bad.ejected_until == pytest.approx(now + expected)
        bad.ejected_until = 0.0
    pool.leg_failed(bad, 3, 10.0, now)
    pool.leg_ok(bad)
    assert bad.failed_in_a_row == 0 and bad.ejections == 0


def test_the_last_instance_of_its_role_is_never_ejected_and_zero_disables():
    pool, (only,) = pool_with("http://d1")
    for _ in range(5):
        assert not pool.leg_failed(only, 3, 10.0, time.monotonic())
    assert only.available
    pool, (bad, _) = pool_with("http://d1", "http://d2")
    for _ in range(5):
        assert not pool.leg_failed(bad, 0, 10.0, time.monotonic())


def test_a_stalling_decode_is_ejected_and_the_healthy_one_serves_the_rest():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d1", hang_after=1), FakeEngine("d2")) as (
                p,
                d1,
                d2,
            ),
            running(
                settings_for([p], [d1, d2], decode_timeout=0.2, eject_after=2, eject_seconds=60)
            ) as (base, proxy),
        ):
            stalled_answers = []
            for _ in range(8):
                status, _, raw = await post(base, completion(3))
                assert status == 200
                stalled_answers.append(b"no answer within 0.2 s" in raw)
            stalled = proxy.pool.get(d1.url)
            assert stalled.ejected_until > time.monotonic()
            assert "ejected for 60 s after 2 failed" in stalled.last_error
        # round robin sent every other request to d1 until its second failure; then d2 only
        assert stalled_answers == [True, False, True] + [False] * 5
        assert len(d2.finished) >= 6

    run(body())


def test_bad_ejection_settings_are_refused():
    assert refused_at(eject_after=-1) == "eject_after"
    assert refused_at(eject_seconds=0) == "eject_seconds"


def test_one_slow_health_answer_is_not_an_outage_two_in_a_row_are():
    pool, (d1, _) = pool_with("http://d1", "http://d2")
    pool.probed(d1, False, "/health: TimeoutError")
    assert d1.healthy and d1.last_error == "/health: TimeoutError"
    pool.probed(d1, True, None)
    pool.probed(d1, False, "/health: TimeoutError")
    assert d1.healthy  # the success in between started the count again
    pool.probed(d1, False, "/health: TimeoutError")
    assert not d1.healthy and not d1.available
    pool.probed(d1, True, None)
    assert d1.healthy and d1.probes_failed == 0


def test_a_served_leg_brings_back_an_instance_only_slow_probes_took_down():
    pool, (d1, d2) = pool_with("http://d1", "http://d2")
    pool.probed(d1, False, "/health: TimeoutError")
    pool.probed(d1, False, "/health: TimeoutError")
    assert not d1.healthy
    pool.leg_ok(d1)  # a request it was serving finished fine
    assert d1.healthy and d1.available
    pool.set_health(d2, False, "ClientConnectorError: refused")  # down for another reason
    pool.leg_ok(d2)
    assert not d2.healthy


def test_a_zero_health_timeout_is_refused():
    assert refused_at(health_timeout=0) == "health_timeout"
