"""The retry rules and budget, pure (connector/legs/retry.py), and the ejection policy's spare and
share rules (connector/pool/instances.py)."""

import time

import pytest

from connector.legs.retry import Retry, RetryBudget, RetrySettings, covers_a_hang, plan
from connector.pool.instances import InstancePool
from connector.pool.policy import RoundRobin
from connector.settings import ProxySettings
from tests.connector.fakes import refused_at, settings_for


@pytest.mark.parametrize("connector,mode", [("nixl", "read"), ("moriio", "read")])
def test_a_failed_prefill_is_tried_on_another_prefill_with_the_same_decode(connector, mode):
    for cause in ("refused", "reset", "status", "garbage", "timeout"):
        retry = plan("prefill", cause, connector, mode, client_has_bytes=False, client_error=False)
        assert retry == Retry(new_prefill=True, new_decode=False, reuse_params=False)


def test_a_refused_nixl_decode_keeps_the_prefills_params_moriio_gets_a_fresh_prefill():
    nixl = plan("decode", "refused", "nixl", "read", client_has_bytes=False, client_error=False)
    assert nixl == Retry(new_prefill=False, new_decode=True, reuse_params=True)
    mori = plan("decode", "refused", "moriio", "read", client_has_bytes=False, client_error=False)
    assert mori == Retry(new_prefill=True, new_decode=True, reuse_params=False)


@pytest.mark.parametrize("cause", ["reset", "status", "garbage", "timeout", "first_byte"])
def test_a_decode_that_may_have_pulled_is_retried_with_a_fresh_prefill(cause):
    retry = plan("decode", cause, "nixl", "read", client_has_bytes=False, client_error=False)
    assert retry == Retry(new_prefill=True, new_decode=True, reuse_params=False)


def test_write_mode_retries_the_pair_whichever_leg_failed():
    for leg in ("prefill", "decode"):
        retry = plan(leg, "refused", "moriio", "write", client_has_bytes=False, client_error=False)
        assert retry == Retry(new_prefill=True, new_decode=True, reuse_params=False)


def test_never_after_the_first_byte_reached_the_client_nor_for_the_clients_own_error():
    assert (
        plan("decode", "reset", "nixl", "read", client_has_bytes=True, client_error=False) is None
    )
    assert (
        plan("prefill", "status", "nixl", "read", client_has_bytes=False, client_error=True) is None
    )


def test_the_budget_allows_attempts_per_request_then_refuses():
    budget = RetryBudget(RetrySettings(attempts=3), now=0.0)
    assert budget.why_not(1, arrival=0.0, now=0.1) is None
    assert budget.why_not(2, arrival=0.0, now=0.2) is None
    assert budget.why_not(3, arrival=0.0, now=0.3) == "attempts"


def test_no_attempt_starts_past_the_deadline():
    budget = RetryBudget(RetrySettings(deadline_s=2.0), now=0.0)
    assert budget.why_not(1, arrival=0.0, now=2.0) == "deadline"
    assert budget.refused["deadline"] == 1


def test_a_retry_storm_is_bounded_by_the_share_of_traffic_and_the_floor():
    s = RetrySettings(attempts=10, ratio=0.2, min_per_s=2.0, burst=10.0)
    budget = RetryBudget(s, now=0.0)
    granted = 0
    for i in range(1000):  # 1,000 requests over 10 s, every attempt of each one fails
        now = i * 0.01
        budget.request(now)
        attempt = 1
        while budget.why_not(attempt, arrival=now, now=now) is None:
            granted += 1
            attempt += 1
    # the burst, plus a fifth of the requests, plus the floor's 2 a second over 10 s
    assert granted <= 10 + 0.2 * 1000 + 2.0 * 10
    assert budget.refused["budget"] > 0


def test_a_spare_can_retry_every_request_a_hung_instance_held_at_any_rate():
    """Issue 39: one of two decodes hangs; `first_byte` s later it is found holding half of
    those seconds' requests, each retried at once. A fixed cap of 10 tokens refused most."""
    s = ProxySettings(port=0).retry
    first = ProxySettings(port=0).first_byte_timeout
    assert covers_a_hang(s, first, instances=2)
    for rate in (2, 8, 50, 400):
        budget = RetryBudget(s, now=0.0)
        arrivals = [i / rate for i in range(int(rate * 60))]  # a minute of steady traffic
        for at in arrivals:
            budget.request(at)
        now = arrivals[-1]
        held = [at for at in arrivals if now - at < first and int(at * rate) % 2 == 0]
        refused = [at for at in held if budget.why_not(1, arrival=at, now=now) is not None]
        assert held and refused == [], (rate, len(held), len(refused))


def test_saved_tokens_expire_with_the_requests_that_earned_them():
    s = RetrySettings(attempts=10, ratio=0.5, min_per_s=0.0, burst=1.0, deadline_s=10.0)
    budget = RetryBudget(s, now=0.0)
    for i in range(100):  # 100 requests in the first second: 50 tokens saved
        budget.request(i / 100)
    assert budget.tokens == pytest.approx(51.0)
    budget.request(100.0)  # long after: their share is gone, the cap is the burst again
    assert budget.tokens <= 1.0 + 0.5


def test_backoff_doubles_up_to_its_cap():
    budget = RetryBudget(RetrySettings(backoff_s=0.1, backoff_max_s=0.3), now=0.0)
    assert [budget.backoff(n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.3, 0.3]


def test_bad_retry_settings_are_refused_naming_the_field():
    for field, value in (
        ("retry_attempts", 0),
        ("retry_deadline", 0),
        ("retry_budget_ratio", 1.5),
        ("retry_min_per_s", -1),
        ("retry_backoff", 20),
        ("retry_burst", 0.5),
        ("first_byte_timeout", -1),
        ("eject_max_share", 0),
    ):
        assert refused_at(**{field: value}) == field


def test_the_retry_settings_come_from_the_proxy_settings():
    s = settings_for(retry_attempts=5, retry_budget_ratio=0.5, retry_burst=2, retry_backoff=0.7)
    assert s.retry == RetrySettings(
        attempts=5, ratio=0.5, burst=2.0, backoff_s=0.7, backoff_max_s=0.7
    )


def _pool(n: int):
    pool = InstancePool(RoundRobin())
    pool.upsert("http://p", "prefill", "read")
    return pool, [pool.upsert(f"http://d{i}", "decode", "read") for i in range(n)]


def test_a_refused_connection_ejects_at_once_with_a_spare_never_the_last():
    pool, (d0, d1) = _pool(2)
    assert pool.leg_failed(d0, 3, 10.0, time.monotonic(), at_once=True)
    assert not d0.available
    assert not pool.leg_failed(d1, 3, 10.0, time.monotonic(), at_once=True)  # the last one


def test_the_ejected_share_of_a_role_is_capped():
    pool, ds = _pool(4)
    now = time.monotonic()
    ejected = [pool.leg_failed(d, 3, 10.0, now, at_once=True, max_share=0.5) for d in ds]
    assert ejected == [True, True, False, False]


def test_probes_bring_an_ejected_instance_back():
    pool, (d0, _) = _pool(2)
    pool.set_health(d0, False, "ClientConnectorError")
    pool.leg_failed(d0, 3, 60.0, time.monotonic(), at_once=True)
    pool.probed(d0, True, None)  # its /health answers again: a new process, judged afresh
    assert d0.available


def test_ejection_never_empties_a_role():
    pool, (d0, d1) = _pool(2)
    now = time.monotonic()
    pool.leg_failed(d0, 3, 60.0, now, at_once=True)
    d1.ejected_until = now + 60  # say, ejected while d0 was still serving
    assert pool.route() is not None  # both take requests again rather than a 503 for all
    assert set(pool.groups["read"].available("decode")) == {d0, d1}


def test_an_undrained_instance_is_judged_afresh():
    pool, (d0, _) = _pool(2)
    pool.leg_failed(d0, 3, 60.0, time.monotonic(), at_once=True)
    pool.set_draining(d0.url, True)  # the controller restarts it
    pool.set_draining(d0.url, False)
    assert d0.available and d0.ejections == 0


def test_a_retry_off_an_instance_out_of_routing_needs_no_token_but_keeps_the_limits():
    s = RetrySettings(attempts=2, burst=1.0, min_per_s=0.0, ratio=0.0, deadline_s=5.0)
    budget = RetryBudget(s, now=0.0)
    assert budget.why_not(1, arrival=0.0, now=0.1) is None  # the one token
    assert budget.why_not(1, arrival=0.0, now=0.1) == "budget"
    for _ in range(50):  # a hung instance's requests, moved to the spare
        assert budget.why_not(1, arrival=0.0, now=0.2, moved_off=True) is None
    assert budget.moved == 50 and budget.spent == 1
    assert budget.why_not(2, arrival=0.0, now=0.2, moved_off=True) == "attempts"
    assert budget.why_not(1, arrival=0.0, now=5.0, moved_off=True) == "deadline"
