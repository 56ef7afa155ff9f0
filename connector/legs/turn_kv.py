"""Pure: bidirectional KV for multi-turn (NIXL `bidirectional_kv_xfer`, PROTOCOL.md 4b) as the
proxy sees it. A decode that keeps a turn's blocks answers with kv_transfer_params naming
them; the proxy files them under the conversation so far (the turn's messages plus the
answer) and hands them to the prefill leg of the next turn whose messages start with exactly
that, so the prefill pulls the blocks back instead of computing them.

The key is the turn detection behind pdctl_proxy_turns_total (client_body.turn_kind): a
follow-up chat request carries earlier assistant answers, and everything up to and including
its last one is the previous turn's prompt + answer. A completion prompt cannot say where the
last answer ended, so a completion's kept KV is filed under its prompt + answer text, and a
later prompt that starts with exactly that text takes it (`TurnStore.find_prefix`: candidates
share the text's first characters, then its last ones, then its digest).

The store is bounded (LRU, max entries) and an entry lasts the decode's block TTL
(decoder_kv_blocks_ttl; vLLM's default lease is VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 480 s):
after it the decode has freed the blocks and a pull could only fail.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

# The decode's params the next prefill needs to find its blocks (NIXL's read shape).
_CARRIED = (
    "remote_block_ids",
    "remote_engine_id",
    "remote_request_id",
    "remote_host",
    "remote_port",
    "remote_num_tokens",
    "tp_size",
)


def _digest(messages: list[Any]) -> str:
    """A stable digest of messages as the engine renders them: role and content only (a
    client's extra fields, e.g. `name` order or tool ids, do not change the tokens we key)."""
    shaped = [
        [m.get("role"), m.get("content")] if isinstance(m, dict) else ["", m] for m in messages
    ]
    text = json.dumps(shaped, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def previous_turn_key(body: dict[str, Any], endpoint: str) -> str | None:
    """The key a follow-up turn looks its earlier KV up by: its messages up to and including
    the last assistant answer. None for a first turn or a completion."""
    if not endpoint.endswith("/chat/completions"):
        return None
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    last = max(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        default=None,
    )
    return None if last is None else _digest(messages[: last + 1])


def next_turn_key(body: dict[str, Any], answer: str) -> str:
    """The key this turn's kept KV is filed under: its messages plus the answer it got."""
    return _digest([*body["messages"], {"role": "assistant", "content": answer}])


def carried_params(decode_params: Any) -> dict[str, Any] | None:
    """What of a decode's returned kv_transfer_params the next prefill gets, or None when
    they name no kept blocks (bidirectional off on the engine, or a shape we do not know)."""
    if not isinstance(decode_params, dict) or not decode_params.get("do_remote_prefill"):
        return None
    if any(decode_params.get(k) in (None, "", []) for k in _CARRIED if k != "tp_size"):
        return None
    return {k: decode_params[k] for k in _CARRIED if k in decode_params}


def pull_back_params(carried: dict[str, Any]) -> dict[str, Any]:
    """A prefill leg's kv_transfer_params with an earlier turn's blocks: it pulls them from the
    decode (do_remote_prefill) and, as every prefill leg, holds its own for the next decode."""
    return {"do_remote_decode": True, "do_remote_prefill": True, **carried}


@dataclass(slots=True)
class _Entry:
    params: dict[str, Any]
    expires: float


ANCHOR_CHARS = 64  # a filed completion text's first and last characters, to find it by
MAX_PREFIX_PROBES = 4096  # candidates looked at per prompt, newest first


def text_key(text: str) -> str:
    """The key of a completion's prompt + answer text."""
    return "t:" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass(slots=True, frozen=True)
class _Prefix:
    head: str
    length: int
    tail: str


class TurnStore:
    """Kept-KV params by conversation key: LRU-bounded, each expiring `ttl_s` after it was
    filed (`now` passed in: a monotonic clock). An entry is taken once: the decode frees the
    blocks after the prefill's read, so a second pull would find nothing."""

    def __init__(self, max_entries: int, ttl_s: float) -> None:
        if max_entries < 1 or ttl_s <= 0:
            raise ValueError("a turn store needs at least one entry and a positive TTL")
        self.max_entries, self.ttl_s = max_entries, ttl_s
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.evicted = 0  # pushed out by the bound before their TTL
        # completion texts filed: each key's prefix, and the keys by their text's head
        self._prefixes: dict[str, _Prefix] = {}
        self._by_head: dict[str, dict[str, None]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: str, params: dict[str, Any], now: float) -> None:
        self._drop(key)
        self._entries[key] = _Entry(params, now + self.ttl_s)
        self._expire(now)
        while len(self._entries) > self.max_entries:
            self._drop(next(iter(self._entries)))
            self.evicted += 1

    def put_text(self, text: str, params: dict[str, Any], now: float) -> None:
        """File a completion's kept KV under its prompt + answer text (not one shorter than
        ANCHOR_CHARS: too little KV to be worth a pull)."""
        if len(text) < ANCHOR_CHARS:
            return
        key = text_key(text)
        self.put(key, params, now)
        if key in self._entries:
            head = text[:ANCHOR_CHARS]
            self._prefixes[key] = _Prefix(head, len(text), text[-ANCHOR_CHARS:])
            self._by_head.setdefault(head, {})[key] = None

    def find_prefix(self, prompt: str) -> str | None:
        """The key of the longest filed completion text `prompt` starts with, or None."""
        candidates = self._by_head.get(prompt[:ANCHOR_CHARS])
        if not candidates:
            return None
        best: _Prefix | None = None
        best_key = None
        for i, key in enumerate(reversed(candidates)):
            if i >= MAX_PREFIX_PROBES:
                break
            p = self._prefixes[key]
            if p.length > len(prompt) or (best is not None and p.length <= best.length):
                continue
            if prompt[p.length - len(p.tail) : p.length] != p.tail:
                continue
            if text_key(prompt[: p.length]) == key:
                best, best_key = p, key
        return best_key

    def take(self, key: str, now: float) -> tuple[dict[str, Any] | None, str]:
        """(params, outcome): `carried`, `expired` (filed, but past the TTL) or `missed`."""
        entry = self._entries.get(key)
        self._drop(key)
        self._expire(now)
        if entry is None:
            return None, "missed"
        if entry.expires <= now:
            return None, "expired"
        return entry.params, "carried"

    def _expire(self, now: float) -> None:
        # Filed in order with one TTL, so expiry order is insertion order, except for keys
        # filed again (moved to the end with a later expiry): stop at the first live one.
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.expires > now:
                return
            self._drop(key)

    def _drop(self, key: str) -> None:
        """Forget a key, with its completion prefix when it has one."""
        self._entries.pop(key, None)
        prefix = self._prefixes.pop(key, None)
        if prefix is not None:
            keys = self._by_head[prefix.head]
            keys.pop(key, None)
            if not keys:
                del self._by_head[prefix.head]


def answer_part(message: Any) -> tuple[str, Any]:
    """(text, kv_transfer_params) of one decoded answer: a whole JSON answer or one SSE event
    (chat `message`/`delta` content, completion `text`; params on the last chunk)."""
    if not isinstance(message, dict):
        return "", None
    text = ""
    choices = message.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        part = choice.get("delta") or choice.get("message") or {}
        content = part.get("content") if isinstance(part, dict) else None
        text = content if isinstance(content, str) else choice.get("text") or ""
    return (text if isinstance(text, str) else ""), message.get("kv_transfer_params")
