"""Synthetic datasets: lengths, shared prefixes and growing multi-turn contexts."""

from __future__ import annotations

import random

import pytest

from domain.workload.datasets import (
    length_range,
    multi_turn_requests,
    random_requests,
    shared_prefix_requests,
)
from domain.workload.tokenizer import count_tokens, encode


def test_length_range_matches_vllm_bounds() -> None:
    assert length_range(100, 0.0) == (100, 100)
    assert length_range(100, 0.5) == (50, 150)
    assert length_range(1, 0.9) == (1, 1)


def test_random_prompts_have_exact_lengths_without_range() -> None:
    requests = random_requests(20, 64, 16, 0.0, random.Random(0))
    assert len(requests) == 20
    for request in requests:
        assert request.prompt_len == 64
        assert count_tokens(request.prompt_text()) == 64
        assert encode(request.prompt_text()) == request.prompt_ids
        assert request.output_len == 16
        assert request.after is None


def test_random_lengths_stay_within_range_and_spread() -> None:
    requests = random_requests(400, 100, 50, 0.5, random.Random(1))
    inputs = [r.prompt_len for r in requests]
    outputs = [r.output_len for r in requests]
    assert min(inputs) >= 50 and max(inputs) <= 150
    assert min(outputs) >= 25 and max(outputs) <= 75
    assert max(inputs) - min(inputs) > 80
    assert sum(inputs) / len(inputs) == pytest.approx(100, rel=0.05)


def test_random_prompts_differ_and_repeat_with_the_seed() -> None:
    first = random_requests(10, 32, 4, 0.2, random.Random(5))
    again = random_requests(10, 32, 4, 0.2, random.Random(5))
    assert first == again
    assert len({tuple(r.prompt_ids[:8]) for r in first}) == 10


def test_shared_prefix_prompts_open_with_one_of_the_prefixes() -> None:
    requests = shared_prefix_requests(12, 20, 8, 0.0, 30, 3, random.Random(2))
    prefixes = {tuple(r.prompt_ids[:30]) for r in requests}
    assert len(prefixes) == 3
    for i, request in enumerate(requests):
        assert request.prompt_len == 50
        assert tuple(request.prompt_ids[:30]) == tuple(requests[i % 3].prompt_ids[:30])
    assert len({tuple(r.prompt_ids[30:]) for r in requests}) == 12


def test_multi_turn_contexts_grow_and_contain_the_earlier_turns() -> None:
    requests = multi_turn_requests(6, 10, 5, 0.0, 3, random.Random(3))
    assert [(r.conversation, r.turn) for r in requests] == [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
        (0, 2),
        (1, 2),
    ]
    for request in requests:
        if request.turn == 0:
            assert request.after is None
            continue
        before = requests[request.after]
        assert (before.conversation, before.turn) == (request.conversation, request.turn - 1)
        assert request.messages[: len(before.messages)] == before.messages
        assert request.messages[len(before.messages)].role == "assistant"
        assert len(request.messages[len(before.messages)].token_ids) == before.output_len
        assert request.prompt_len == before.prompt_len + before.output_len + 10
    assert [m.role for m in requests[-1].messages] == ["user", "assistant"] * 2 + ["user"]


def test_multi_turn_stops_at_the_requested_count() -> None:
    requests = multi_turn_requests(7, 4, 2, 0.0, 3, random.Random(4))
    assert len(requests) == 7
    assert all(r.after is None or r.after < i for i, r in enumerate(requests))
    assert [r.turn for r in requests] == [0, 0, 0, 1, 1, 1, 2]
