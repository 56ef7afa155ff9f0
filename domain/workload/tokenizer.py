"""The one deterministic tokenizer pdctl uses everywhere (stand-in engine, bench, planner).

A token is a pseudo-word of two syllables; text is split on whitespace and each vocabulary
word is one token, so `len(encode(decode(ids))) == len(ids)` and a generated stream
re-tokenizes to exactly the count it reported. Any other text (a user's English prompt) is
estimated at one token per CHARS_PER_TOKEN characters, counting each piece's leading space and
each piece at least one token: OpenAI's rule of thumb for English under BPE vocabularies
(~4 characters, ~3/4 of a word per token). No production tokenizer is on this machine to
measure it against; the tiny Llama's (2,048 entries, trained on Python sources) splits finer
and this estimate comes out 41% below its count on docs/ prose (1.69 tokens a word; it: 2.87).
Ids for such text hash onto the vocabulary. A model's real tokenizer, when the stand-in is
given one, replaces this (simulator/protocol/model_tokenizer.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]

VOCAB_SIZE = 4096
VOCAB: tuple[str, ...] = tuple(a + b for a in _SYLLABLES for b in _SYLLABLES)[:VOCAB_SIZE]
_INDEX = {word: i for i, word in enumerate(VOCAB)}


CHARS_PER_TOKEN = 4.0


def encode(text: str) -> list[int]:
    """Token ids of `text`: one per vocabulary word, the estimate for anything else."""
    ids: list[int] = []
    chars = 0.0  # characters of other pieces so far, and the tokens they were given
    given = 0
    for piece in text.split():
        found = _INDEX.get(piece)
        if found is not None:
            ids.append(found)
            continue
        # With its leading space, as BPE attaches it; a short word is still a token of its own.
        chars += max(len(piece) + 1, CHARS_PER_TOKEN)
        due = max(1, round(chars / CHARS_PER_TOKEN))  # rounded over the running total
        ids += _estimated_ids(piece, due - given)
        given = due
    return ids


def count_tokens(text: str) -> int:
    return len(encode(text))


def decode(token_ids: Iterable[int]) -> str:
    return " ".join(VOCAB[t % VOCAB_SIZE] for t in token_ids)


def token_text(token_id: int, first: bool) -> str:
    """The text of one streamed token; tokens after the first carry their leading space."""
    word = VOCAB[token_id % VOCAB_SIZE]
    return word if first else " " + word


def output_token_ids(
    prompt_ids: Sequence[int], start: int, count: int, seed: int | None = None
) -> list[int]:
    """Deterministic output tokens `start..start+count` for a prompt (same prompt, same text).

    `seed` is prompt_seed(prompt_ids), for callers that ask many times for one prompt."""
    if seed is None:
        seed = prompt_seed(prompt_ids)
    return [_mix(seed, i) % VOCAB_SIZE for i in range(start, start + count)]


def prompt_seed(prompt_ids: Sequence[int]) -> int:
    return zlib.crc32(b"".join(t.to_bytes(4, "little") for t in prompt_ids[-64:]))


def _estimated_ids(piece: str, count: int) -> list[int]:
    seed = zlib.crc32(piece.encode())
    return [_mix(seed, i) % VOCAB_SIZE for i in range(count)]


def _mix(seed: int, position: int) -> int:
    # A cheap integer hash (splitmix-like): deterministic, no global random state.
    x = (seed * 0x9E3779B1 + position * 0x85EBCA77 + 0x165667B1) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    return x
