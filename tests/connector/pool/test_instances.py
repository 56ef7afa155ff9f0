import pytest

from connector.pool.instances import InstancePool
from connector.pool.policy import LeastTokens, RoundRobin


def pool_with(*specs, policy=None):
    pool = InstancePool(policy or RoundRobin())
    for url, role, mode in specs:
        pool.upsert(url, role, mode)
    return pool


def test_groups_by_mode():
    pool = pool_with(
        ("http://p1", "prefill", "read"),
        ("http://d1", "decode", "read"),
        ("http://p2", "prefill", "write"),
    )
    assert set(pool.groups["read"].instances) == {"http://p1", "http://d1"}
    assert set(pool.groups["write"].instances) == {"http://p2"}


def test_route_stays_within_one_group():
    pool = pool_with(
        ("http://p1", "prefill", "read"),
        ("http://d1", "decode", "read"),
        ("http://p2", "prefill", "write"),
        ("http://d2", "decode", "write"),
    )
    seen = set()
    for _ in range(6):
        r = pool.route()
        assert r.prefill.mode == r.decode.mode == r.group
        seen.add(r.group)
    assert seen == {"read", "write"}


def test_a_group_without_decode_is_not_routable():
    pool = pool_with(("http://p1", "prefill", "read"), ("http://d2", "decode", "write"))
    assert pool.route() is None
    assert "no available decode" in pool.why_unroutable()


def test_changing_mode_moves_the_instance():
    pool = pool_with(("http://p1", "prefill", "read"))
    inst = pool.get("http://p1")
    inst.begin(10)
    pool.upsert("http://p1", "prefill", "write")
    assert "http://p1" not in pool.groups["read"].instances
    assert pool.groups["write"].instances["http://p1"] is inst
    assert inst.outstanding_tokens == 10  # in-flight load survives the move


def test_drain_and_health_exclude_from_routing():
    pool = pool_with(
        ("http://p1", "prefill", "read"),
        ("http://d1", "decode", "read"),
        ("http://d2", "decode", "read"),
    )
    pool.set_draining("http://d1", True)
    assert {pool.route().decode.url for _ in range(4)} == {"http://d2"}
    pool.set_health(pool.get("http://d2"), False, "down")
    assert pool.route() is None
    pool.set_draining("http://d1", False)
    assert pool.route().decode.url == "http://d1"


def test_paused_group_is_skipped_but_others_serve():
    pool = pool_with(
        ("http://p1", "prefill", "read"),
        ("http://d1", "decode", "read"),
        ("http://p2", "prefill", "write"),
        ("http://d2", "decode", "write"),
    )
    pool.set_paused("read", True)
    assert pool.any_paused()
    assert {pool.route().group for _ in range(4)} == {"write"}
    pool.set_paused("write", True)
    assert pool.route() is None


def test_colocated_balances_whole_requests():
    pool = pool_with(("http://a", "colocated", "colocated"), ("http://b", "both", "colocated"))
    routes = [pool.route() for _ in range(4)]
    assert all(r.prefill is None for r in routes)
    assert [r.decode.url for r in routes] == ["http://a", "http://b", "http://a", "http://b"]


def test_role_must_fit_the_mode():
    pool = InstancePool(RoundRobin())
    with pytest.raises(ValueError):
        pool.upsert("http://x", "colocated", "read")
    with pytest.raises(ValueError):
        pool.upsert("http://x", "prefill", "colocated")
    with pytest.raises(ValueError):
        pool.upsert("http://x", "prefill", "push")


def test_least_tokens_routes_to_the_lighter_pair():
    pool = pool_with(
        ("http://p1", "prefill", "read"),
        ("http://p2", "prefill", "read"),
        ("http://d1", "decode", "read"),
        ("http://d2", "decode", "read"),
        policy=LeastTokens(),
    )
    pool.get("http://p1").begin(500)
    pool.get("http://d2").begin(900)
    r = pool.route()
    assert (r.prefill.url, r.decode.url) == ("http://p2", "http://d1")


def test_load_accounting_and_describe():
    pool = pool_with(("http://p1", "prefill", "read"))
    inst = pool.get("http://p1")
    inst.begin(7)
    d = pool.describe()["instances"][0]
    assert (d["group"], d["outstanding_tokens"], d["outstanding_requests"]) == ("read", 7, 1)
    inst.end(7, ok=False)
    assert (inst.outstanding_tokens, inst.failed) == (0, 1)


def test_dp_rank_round_robin():
    pool = InstancePool(RoundRobin())
    inst = pool.upsert("http://p", "prefill", "read", dp_size=2)
    assert [inst.next_dp_rank() for _ in range(3)] == [0, 1, 0]
    assert pool.upsert("http://q", "prefill", "read").next_dp_rank() is None


def test_on_change_fires():
    pool = InstancePool(RoundRobin())
    calls = []
    pool.on_change = lambda: calls.append(1)
    pool.upsert("http://p", "prefill", "read")
    pool.set_paused("read", True)
    pool.remove("http://p")
    assert len(calls) == 3


def test_whole_instances_serve_whole_requests_while_their_partner_restarts():
    pool = pool_with(("http://p1", "prefill", "read"), ("http://d1", "decode", "read"))
    pool.set_whole("http://d1", True)
    pool.set_draining("http://p1", True)
    route = pool.route()
    assert route.group == "colocated" and route.prefill is None
    assert route.decode.url == "http://d1"
    # A re-registration (upsert) keeps the flag; a draining whole instance serves nothing.
    pool.upsert("http://d1", "decode", "write")
    assert pool.get("http://d1").whole
    pool.set_draining("http://d1", True)
    assert pool.route() is None
    pool.set_whole("http://d1", False)
    pool.set_draining("http://p1", False)
    pool.set_draining("http://d1", False)
    assert pool.route() is None  # p1 read, d1 write: no pair, nothing whole
    assert pool.set_whole("http://nope", True) is None
