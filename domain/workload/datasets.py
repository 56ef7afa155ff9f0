"""Synthetic prompts for `pdctl bench`: random, shared-prefix and multi-turn chat.

Prompts are token ids of the project's one tokenizer (`domain.workload.tokenizer`), so the prompt
length the bench reports is exactly what the stand-in engine counts. Pure: seeded in, prompts
out; the same seed gives the same prompts at every request rate of a sweep.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from domain.workload.tokenizer import VOCAB_SIZE, decode

DATASETS = ("random", "shared-prefix", "multi-turn")


@dataclass(frozen=True)
class Message:
    """One chat message; `token_ids` is its content. `text`: the content as a model's own
    tokenizer wrote it (bench/model_prompts.py), whose ids `token_ids` then are."""

    role: str
    token_ids: tuple[int, ...]
    text: str | None = None

    @property
    def content(self) -> str:
        return decode(self.token_ids) if self.text is None else self.text

    def as_openai(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class BenchRequest:
    """One request to offer.

    `messages` is the whole conversation so far (a single user message outside multi-turn);
    `after` is the index of the request that must finish before this one is sent, which is how
    the turns of one conversation stay sequential.
    """

    messages: tuple[Message, ...]
    output_len: int
    conversation: int = 0
    turn: int = 0
    after: int | None = None

    @property
    def prompt_ids(self) -> list[int]:
        """The conversation flattened for `/v1/completions`: contents in order."""
        return [t for message in self.messages for t in message.token_ids]

    @property
    def prompt_len(self) -> int:
        return sum(len(message.token_ids) for message in self.messages)

    def prompt_text(self) -> str:
        if len(self.messages) == 1:
            return self.messages[0].content
        return decode(self.prompt_ids)


def length_range(length: int, range_ratio: float) -> tuple[int, int]:
    """Inclusive bounds [L*(1-r), L*(1+r)] as vLLM's random dataset draws them (at least 1)."""
    low = max(1, int(length * (1 - range_ratio)))
    high = max(low, int(length * (1 + range_ratio)))
    return low, high


def random_requests(
    count: int, input_len: int, output_len: int, range_ratio: float, rng: random.Random
) -> list[BenchRequest]:
    """Independent prompts of random tokens: nothing for a prefix cache to reuse."""
    return [
        BenchRequest(
            messages=(Message("user", _random_ids(_draw(input_len, range_ratio, rng), rng)),),
            output_len=_draw(output_len, range_ratio, rng),
            conversation=i,
        )
        for i in range(count)
    ]


def shared_prefix_requests(
    count: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    prefix_len: int,
    num_prefixes: int,
    rng: random.Random,
) -> list[BenchRequest]:
    """Prompts that open with one of `num_prefixes` shared prefixes of `prefix_len` tokens.

    The unique suffix has `input_len` tokens (with the range ratio), so a prompt is
    prefix_len + suffix tokens long and a prefix cache can skip the first prefix_len.
    """
    prefixes = [_random_ids(prefix_len, rng) for _ in range(num_prefixes)]
    requests = []
    for i in range(count):
        suffix = _random_ids(_draw(input_len, range_ratio, rng), rng)
        requests.append(
            BenchRequest(
                messages=(Message("user", prefixes[i % num_prefixes] + suffix),),
                output_len=_draw(output_len, range_ratio, rng),
                conversation=i,
            )
        )
    return requests


def multi_turn_requests(
    count: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    turns: int,
    rng: random.Random,
) -> list[BenchRequest]:
    """`count` requests from conversations of `turns` turns whose context grows every turn.

    Turn k sends all earlier user messages and assistant replies plus a new user message. The
    earlier replies are synthetic (as long as the tokens asked for then), which keeps prompts
    deterministic and their lengths exact. Requests come round-robin by turn (every
    conversation's first turn, then every second turn, ...), each naming the turn before it.
    """
    conversations = -(-count // turns)
    history: list[list[BenchRequest]] = []
    for c in range(conversations):
        messages: tuple[Message, ...] = ()
        chat = []
        for t in range(turns):
            messages += (Message("user", _random_ids(_draw(input_len, range_ratio, rng), rng)),)
            reply_len = _draw(output_len, range_ratio, rng)
            chat.append(BenchRequest(messages, reply_len, conversation=c, turn=t))
            messages += (Message("assistant", _random_ids(reply_len, rng)),)
        history.append(chat)
    ordered: list[BenchRequest] = []
    position: dict[tuple[int, int], int] = {}
    for t in range(turns):
        for c in range(conversations):
            if len(ordered) == count:
                return ordered
            request = history[c][t]
            after = position.get((c, t - 1))
            position[(c, t)] = len(ordered)
            ordered.append(BenchRequest(request.messages, request.output_len, c, t, after))
    return ordered


def _draw(length: int, range_ratio: float, rng: random.Random) -> int:
    low, high = length_range(length, range_ratio)
    return rng.randint(low, high)


def _random_ids(length: int, rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.choices(range(VOCAB_SIZE), k=length))
