"""A multi-turn chat workload whose context grows with the real answers: turn k's messages are
turn k-1's plus the answer the server gave and a new user text, as a chat client sends them.

The `multi-turn` dataset (domain/workload/datasets.py) replays synthetic answers, so its follow-ups
never match what a decode kept; this one waits for each answer, which is what bidirectional
KV (connector/legs/turn_kv.py) needs. Conversations run side by side, in lockstep by turn (every
conversation's turn k, then every turn k+1), so a server's counters read between turns belong
to one turn. Pure parts (the texts, the next messages, per-turn figures) apart from the I/O.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.sse import LineSplitter, parse_line
from domain.workload.tokenizer import VOCAB_SIZE, decode


@dataclass(frozen=True, slots=True)
class MultiTurnConfig:
    conversations: int = 4
    turns: int = 4
    first_len: int = 2000  # tokens of the first user message
    user_len: int = 100  # tokens of each later user message
    output_len: int = 200  # tokens of each answer (ignore_eos: exactly this many)
    seed: int = 0
    timeout_s: float = 120.0


@dataclass(slots=True)
class TurnRecord:
    conversation: int
    turn: int
    ok: bool = False
    error: str = ""
    ttft: float = 0.0
    prompt_tokens: int = 0
    answer: str = ""


@dataclass(slots=True)
class TurnSummary:
    turn: int
    ok: int
    mean_ttft_ms: float
    mean_prompt_tokens: float
    extra: dict[str, float] = field(default_factory=dict)  # e.g. engine counters per turn


def user_text(config: MultiTurnConfig, conversation: int, turn: int) -> str:
    """The user's message of one turn: its own words, the same for the same seed."""
    rng = random.Random(f"{config.seed}-{conversation}-{turn}")
    length = config.first_len if turn == 0 else config.user_len
    return decode(rng.randrange(VOCAB_SIZE) for _ in range(length))


def next_messages(history: list[dict[str, str]], answer: str, user: str) -> list[dict[str, str]]:
    """The next turn's messages: everything so far, the answer, the new user text."""
    return [*history, {"role": "assistant", "content": answer}, {"role": "user", "content": user}]


def payload(config: MultiTurnConfig, model: str, messages: list[dict[str, str]]) -> dict:
    return {
        "model": model,
        "messages": messages,
        "max_tokens": config.output_len,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def summarize(records: list[TurnRecord], turns: int) -> list[TurnSummary]:
    """Mean TTFT and prompt length of each turn over the conversations that succeeded."""
    out = []
    for t in range(turns):
        done = [r for r in records if r.turn == t and r.ok]
        out.append(
            TurnSummary(
                t,
                len(done),
                statistics.fmean(r.ttft for r in done) * 1000 if done else float("nan"),
                statistics.fmean(r.prompt_tokens for r in done) if done else float("nan"),
            )
        )
    return out


async def send_turn(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], record: TurnRecord
) -> None:
    """One streamed turn: TTFT at the first token's chunk, the answer's text, usage."""
    start = time.perf_counter()
    lines = LineSplitter()
    pieces: list[str] = []
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                record.error = f"HTTP {response.status}: {(await response.text())[:200]}"
                return
            async for chunk in response.content.iter_any():
                for line in lines.feed(chunk):
                    event = parse_line(line)
                    if event.error:
                        record.error = event.error
                        return
                    if event.token and not record.ttft:
                        record.ttft = time.perf_counter() - start
                    if event.prompt_tokens is not None:
                        record.prompt_tokens = event.prompt_tokens
                    pieces.append(_content(line))
    except (aiohttp.ClientError, TimeoutError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
        return
    record.answer, record.ok = "".join(pieces), record.ttft > 0


def _content(line: bytes) -> str:
    """The answer text one SSE line carries (chat `delta.content`)."""
    text = line.decode("utf-8", errors="replace").strip()
    if not text.startswith("data: {"):
        return ""
    choices = json.loads(text[6:]).get("choices") or [{}]
    delta = choices[0].get("delta") or {}
    content = delta.get("content")
    return content if isinstance(content, str) else ""


async def run_multi_turn(
    base_url: str,
    model: str,
    config: MultiTurnConfig,
    between_turns: Callable[[int], Awaitable[dict[str, float]]] | None = None,
) -> tuple[list[TurnRecord], list[TurnSummary]]:
    """Every conversation's turns, in lockstep; `between_turns(t)`, awaited after turn t,
    returns figures to keep with that turn (e.g. a prefill's counters' deltas)."""
    url = base_url.rstrip("/") + "/v1/chat/completions"
    histories = [
        [{"role": "user", "content": user_text(config, c, 0)}] for c in range(config.conversations)
    ]
    records: list[TurnRecord] = []
    extras: dict[int, dict[str, float]] = {}
    timeout = aiohttp.ClientTimeout(total=config.timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
        for t in range(config.turns):
            turn = [TurnRecord(c, t) for c in range(config.conversations)]
            await asyncio.gather(
                *(
                    send_turn(session, url, payload(config, model, histories[c]), turn[c])
                    for c in range(config.conversations)
                )
            )
            records += turn
            if between_turns is not None:
                extras[t] = await between_turns(t)
            for c, record in enumerate(turn):
                user = user_text(config, c, t + 1)
                histories[c] = next_messages(histories[c], record.answer, user)
    summaries = summarize(records, config.turns)
    for summary in summaries:
        summary.extra = extras.get(summary.turn, {})
    return records, summaries
