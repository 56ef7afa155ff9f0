"""`pdctl bench --dataset chat-sessions`: conversations whose every turn sends the answer the
server gave (bench/turns/multi_turn.py), what bidirectional KV transfer needs to carry a decode's
blocks into the next turn's prefill; the `multi-turn` dataset replays synthetic answers, so a
proxy never finds its follow-ups. Turns go in lockstep (every conversation's turn k, then
k+1), so no request rate applies. Out: a row per turn (answered, mean TTFT, mean prompt
tokens) and, with --result-json, the same as JSON."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp
from rich.table import Table

from bench.client import fetch_model
from bench.config import BenchConfig
from bench.turns.multi_turn import MultiTurnConfig, TurnRecord, TurnSummary, run_multi_turn

NAME = "chat-sessions"
MAX_CONVERSATIONS = 1024  # all in flight at once, per turn
MAX_TURNS = 64


@dataclass(frozen=True)
class SessionFlags:
    """The `pdctl bench` flags this dataset reads, as typed."""

    request_rate: str
    num_prompts: int
    turns: int
    input_len: int
    user_len: int
    output_len: int
    seed: int
    timeout: float


def check(flags: SessionFlags) -> str | None:
    """What is wrong with the flags, naming the flag; None when they can run."""
    if flags.request_rate.strip() != "inf":
        return "--request-rate: chat-sessions sends each turn when the last was answered; drop it"
    bounds = (
        ("--num-prompts", flags.num_prompts, 1, MAX_CONVERSATIONS),
        ("--turns", flags.turns, 1, MAX_TURNS),
        ("--input-len", flags.input_len, 1, 1_000_000),
        ("--user-len", flags.user_len, 1, 1_000_000),
        ("--output-len", flags.output_len, 1, 1_000_000),
    )
    for flag, value, low, high in bounds:
        if not low <= value <= high:
            return f"{flag} {value}: between {low} and {high} for chat-sessions"
    if not (math.isfinite(flags.timeout) and flags.timeout > 0):
        return f"--timeout {flags.timeout}: a positive number of seconds"
    return None


def multi_turn_config(flags: SessionFlags) -> MultiTurnConfig:
    return MultiTurnConfig(
        conversations=flags.num_prompts,
        turns=flags.turns,
        first_len=flags.input_len,
        user_len=flags.user_len,
        output_len=flags.output_len,
        seed=flags.seed,
        timeout_s=flags.timeout,
    )


async def run(
    base_url: str, model: str | None, flags: SessionFlags
) -> tuple[str, list[TurnRecord], list[TurnSummary]]:
    """The model (asked of /v1/models when not given; ServerUnreachable when it cannot be)
    and every turn of every conversation."""
    if model is None:
        probe = BenchConfig(base_url=base_url, timeout=flags.timeout)
        async with aiohttp.ClientSession(trust_env=False) as session:
            model = await fetch_model(session, probe)
    records, summaries = await run_multi_turn(base_url, model, multi_turn_config(flags))
    return model, records, summaries


def document(
    model: str, flags: SessionFlags, records: list[TurnRecord], summaries: list[TurnSummary]
) -> dict[str, Any]:
    failed = [r for r in records if not r.ok]
    return {
        "dataset": NAME,
        "model": model,
        "config": {k: v for k, v in asdict(flags).items() if k != "request_rate"},
        "turns": [
            {
                "turn": s.turn + 1,
                "answered": s.ok,
                "sent": flags.num_prompts,
                "mean_ttft_ms": _finite(s.mean_ttft_ms),
                "mean_prompt_tokens": _finite(s.mean_prompt_tokens),
            }
            for s in summaries
        ],
        "failed": len(failed),
        "errors": sorted({r.error for r in failed})[:5],
    }


def table(doc: dict[str, Any]) -> Table:
    out = Table(title=f"chat sessions: {doc['config']['num_prompts']} conversations")
    for column in ("turn", "answered", "mean TTFT (ms)", "mean prompt tokens", "TTFT / turn 1"):
        out.add_column(column, justify="right")
    first = doc["turns"][0]["mean_ttft_ms"] if doc["turns"] else None
    for row in doc["turns"]:
        ttft, tokens = row["mean_ttft_ms"], row["mean_prompt_tokens"]
        ratio = f"{ttft / first:.2f}" if ttft is not None and first else "-"
        out.add_row(
            str(row["turn"]),
            f"{row['answered']}/{row['sent']}",
            "-" if ttft is None else f"{ttft:.1f}",
            "-" if tokens is None else f"{tokens:.0f}",
            ratio,
        )
    return out


def _finite(value: float) -> float | None:
    return round(value, 3) if math.isfinite(value) else None
