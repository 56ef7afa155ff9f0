"""Prompts in a model's own tokens, for `pdctl bench --tokenizer` (the random dataset).

A server that tokenizes like the model (real vLLM, or `pdctl sim --tokenizer`) counts the
bench's own prompts, made of pdctl's words, at some other length. With the model's
tokenizer.json (through `tokenizers`, no torch), each prompt is made as vLLM's random dataset
makes it: random ids of the vocabulary (special tokens left out), decoded to text, re-encoded,
and cut or topped up until the text re-encodes to the length asked. The text is what is sent,
so the server does the same work for this client as for `vllm bench serve`; its length as
reported is the re-encoded count, without the special tokens a server adds (vLLM's BOS), as
vLLM's client counts it.
"""

from __future__ import annotations

import random
from dataclasses import replace
from functools import cache
from pathlib import Path

from tokenizers import Tokenizer

from bench.config import BenchConfigError
from domain.workload.datasets import BenchRequest, Message

FLAG = "--tokenizer"
TRIES = 10  # vLLM's dataset settles in one or two; a tokenizer that never does keeps its count
# Text cut where two tokens merge can swing between one too many and one too few: then a fresh
# draw, a few times, before a prompt keeps the length it re-encodes to.
DRAWS = 5


@cache
def load(path: str) -> Tokenizer:
    """The tokenizer.json at `path` (or in that folder); an error naming the flag otherwise."""
    file = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
    if not file.is_file():
        raise BenchConfigError(FLAG, f"no tokenizer.json at {path}")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # the library's parse errors have no common class
        raise BenchConfigError(FLAG, f"{file}: not a readable tokenizer.json ({exc})") from None


def in_model_tokens(
    requests: list[BenchRequest], tokenizer: Tokenizer, rng: random.Random
) -> list[BenchRequest]:
    """Each request's prompt remade in the model's tokens, as long as it was asked to be."""
    special = set(tokenizer.get_added_tokens_decoder())
    vocab = [i for i in range(tokenizer.get_vocab_size()) if i not in special]
    return [
        replace(r, messages=(Message("user", *_prompt(r.prompt_len, tokenizer, vocab, rng)),))
        for r in requests
    ]


def _prompt(
    length: int, tokenizer: Tokenizer, vocab: list[int], rng: random.Random
) -> tuple[tuple[int, ...], str]:
    for _ in range(DRAWS):
        ids = [rng.choice(vocab) for _ in range(length)]
        for _ in range(TRIES):
            text = tokenizer.decode(ids, skip_special_tokens=False)
            again = tokenizer.encode(text, add_special_tokens=False).ids
            if len(again) == length:
                return tuple(again), text
            ids = again[:length] + [rng.choice(vocab) for _ in range(length - len(again))]
    return tuple(again), text
