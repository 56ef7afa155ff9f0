"""The soak's load: streamed completions through the proxy at a fixed rate, bounded in count,
in wall time and in requests in flight, with a sampler called on its own beat."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

MAX_IN_FLIGHT = 64  # past this the deployment is not keeping up: skip rather than pile up
REQUEST_TIMEOUT_S = 60.0


@dataclass
class Tally:
    sent: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0  # not sent: MAX_IN_FLIGHT were already waiting
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def finished(self) -> int:
        return self.ok + self.failed

    def error(self, what: str) -> None:
        self.failed += 1
        self.errors[what[:80]] = self.errors.get(what[:80], 0) + 1


def body(i: int, input_words: int, output_len: int) -> dict:
    words = " ".join(f"w{(i * 7919 + k) % 5000}" for k in range(input_words))
    return {
        "model": "tiny",
        "prompt": words,
        "max_tokens": output_len,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def _one(session: aiohttp.ClientSession, url: str, payload: dict, tally: Tally) -> None:
    try:
        async with session.post(url, json=payload) as resp:
            data = await resp.read()
            if resp.status != 200:
                tally.error(f"HTTP {resp.status}")
            elif not data.rstrip().endswith(b"data: [DONE]"):
                tally.error("stream ended without [DONE]")
            elif b'"error"' in data:
                tally.error("error event in the stream")
            else:
                tally.ok += 1
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        tally.error(type(exc).__name__)


async def drive(
    base_url: str,
    rate: float,
    count: int,
    duration_s: float,
    on_beat: Callable[[float, Tally], None],
    beat_s: float,
    input_words: int = 128,
    output_len: int = 32,
) -> Tally:
    """Send up to `count` requests at `rate` for at most `duration_s`, calling `on_beat(t,
    tally)` every `beat_s` seconds (and once at the end, after the last request finished)."""
    tally, url = Tally(), base_url + "/v1/completions"
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    in_flight: set[asyncio.Task] = set()
    start = time.monotonic()
    next_beat = 0.0
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for i in range(count):
            at = i / rate
            if at >= duration_s:
                break
            while (now := time.monotonic() - start) < at:
                if now >= next_beat:
                    on_beat(now, tally)
                    next_beat += beat_s
                await asyncio.sleep(min(at - now, max(0.0, next_beat - now)))
            if len(in_flight) >= MAX_IN_FLIGHT:
                tally.skipped += 1
                continue
            tally.sent += 1
            task = asyncio.create_task(_one(session, url, body(i, input_words, output_len), tally))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.wait(in_flight, timeout=REQUEST_TIMEOUT_S + 5)
    on_beat(time.monotonic() - start, tally)
    return tally
