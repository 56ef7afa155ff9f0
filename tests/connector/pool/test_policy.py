from dataclasses import dataclass

import pytest

from connector.pool.policy import LeastTokens, RoundRobin, make_policy


@dataclass
class Box:
    name: str
    outstanding_tokens: int = 0
    outstanding_requests: int = 0


def test_round_robin_cycles_per_key_independently():
    rr = RoundRobin()
    a, b, c = Box("a"), Box("b"), Box("c")
    assert [rr.pick("p", [a, b, c]).name for _ in range(4)] == ["a", "b", "c", "a"]
    assert rr.pick("d", [a, b]).name == "a"


def test_least_tokens_picks_the_lightest():
    lt = LeastTokens()
    boxes = [Box("a", 100, 1), Box("b", 10, 5), Box("c", 50, 0)]
    assert lt.pick("k", boxes).name == "b"


def test_least_tokens_breaks_token_ties_by_requests_then_rotates():
    lt = LeastTokens()
    assert lt.pick("k", [Box("a", 5, 2), Box("b", 5, 1)]).name == "b"
    tied = [Box("a"), Box("b")]
    assert {lt.pick("k", tied).name for _ in range(2)} == {"a", "b"}


def test_make_policy():
    assert isinstance(make_policy("round-robin"), RoundRobin)
    assert isinstance(make_policy("least-tokens"), LeastTokens)
    with pytest.raises(ValueError):
        make_policy("random")
