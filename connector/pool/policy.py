"""Pair selection policies: round-robin, and least outstanding tokens. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class Loaded(Protocol):
    outstanding_tokens: int
    outstanding_requests: int


T = TypeVar("T", bound=Loaded)

POLICIES = ("round-robin", "least-tokens")


class RoundRobin:
    """Independent round-robin per key (e.g. "read/prefill"), as vLLM's example proxies do."""

    name = "round-robin"

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def pick(self, key: str, candidates: Sequence[T]) -> T:
        n = self._next.get(key, 0)
        self._next[key] = n + 1
        return candidates[n % len(candidates)]


class LeastTokens:
    """The candidate with the fewest outstanding tokens (then requests); ties rotate."""

    name = "least-tokens"

    def __init__(self) -> None:
        self._tie = RoundRobin()

    def pick(self, key: str, candidates: Sequence[T]) -> T:
        best = min((c.outstanding_tokens, c.outstanding_requests) for c in candidates)
        tied = [c for c in candidates if (c.outstanding_tokens, c.outstanding_requests) == best]
        return tied[0] if len(tied) == 1 else self._tie.pick(key, tied)


def make_policy(name: str) -> RoundRobin | LeastTokens:
    if name == "round-robin":
        return RoundRobin()
    if name == "least-tokens":
        return LeastTokens()
    raise ValueError(f"unknown policy {name!r}; expected one of {POLICIES}")
