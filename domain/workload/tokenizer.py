"""The one deterministic tokenizer pdctl uses everywhere (stand-in engine, bench, planner).

A token is a pseudo-word of two syllables; text is split on whitespace and each piece is one
token (unknown pieces hash onto the vocabulary), so `len(encode(decode(ids))) == len(ids)`
and a generated stream re-tokenizes to exactly the count it reported.
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


def encode(text: str) -> list[int]:
    """Token ids of `text`: one per whitespace-separated piece."""
    return [_piece_id(piece) for piece in text.split()]


def count_tokens(text: str) -> int:
    return len(text.split())


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


def _piece_id(piece: str) -> int:
    found = _INDEX.get(piece)
    return found if found is not None else zlib.crc32(piece.encode()) % VOCAB_SIZE


def _mix(seed: int, position: int) -> int:
    # A cheap integer hash (splitmix-like): deterministic, no global random state.
    x = (seed * 0x9E3779B1 + position * 0x85EBCA77 + 0x165667B1) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    return x
