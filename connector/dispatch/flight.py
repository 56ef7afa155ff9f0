"""One request in flight at the proxy: what it measures while the decode's bytes pass through.

Pure: bytes and times in. The scan looks only for SSE event boundaries, `"choices":[{` (a token
event), the usage chunk and `[DONE]`, so forwarding stays cheap. It also notices an upstream that
answers 200 with garbage: a `data:` event that does not start and end like JSON (`{...}` or
`[DONE]`), or no event boundary within MAX_EVENT_BYTES; `malformed` then says what came.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from connector.legs.turn_kv import answer_part
from connector.measure.timing import RequestTiming, SloTargets, judge, summarize
from connector.pool.instances import Route
from domain.measures.ttft_parts import PARTS_COMMENT, EngineTransfer, TtftParts, split

MAX_EVENT_BYTES = 8 << 20  # one SSE event; vLLM's largest (prompt logprobs) stay well below

# The clock every time in a Flight is read on. Not loop.time(): uvloop's has millisecond
# resolution, too coarse for ITL.
clock = time.perf_counter
_COMMENT = PARTS_COMMENT.encode()


class Flight:
    """One request in flight: what the proxy measures while it passes the bytes through."""

    __slots__ = (
        "_parts",
        "answer",
        "answer_grace",
        "arrival",
        "attempt_at",
        "attempts",
        "blamed",
        "cause",
        "done_at",
        "end",
        "endpoint",
        "error",
        "estimate",
        "first_attempt",
        "first_byte_missed",
        "kv_lost",
        "kv_stats",
        "last_read",
        "leg_path",
        "malformed",
        "pinned",
        "prefill_end",
        "prefill_start",
        "prepared",
        "pull_params",
        "request_id",
        "reshape",
        "returned_kv",
        "route",
        "status",
        "stream",
        "tail",
        "timed_out",
        "token_times",
        "ttft_parts",
        "usage_prompt",
        "usage_tokens",
        "wall",
        "want_parts",
    )

    def __init__(self, arrival: float, endpoint: str) -> None:
        self.arrival = arrival
        self.wall = time.time()
        self.endpoint = endpoint
        self.stream = False
        self.route: Route | None = None
        self.request_id = ""
        self.prefill_start: float | None = None
        self.prefill_end: float | None = None
        self.token_times: list[float] = []
        self.usage_tokens: int | None = None
        self.usage_prompt: int | None = None  # the usage's prompt_tokens
        self.estimate = (1, 1)  # (prompt, output) tokens as judged at arrival (client_body)
        # a leg not streamed: how much longer its first byte (its whole answer) may take
        self.answer_grace = 0.0
        self.tail = b""
        self.end: float | None = None
        self.done_at: float | None = None  # when `data: [DONE]` passed through
        self.status = 200
        self.error: str | None = None
        self.blamed: str | None = None  # the instance whose leg failed
        self.prepared = False
        self.last_read = arrival
        self.timed_out = False
        self.malformed: bytes | None = None  # the start of an event that is not JSON
        self.cause: str | None = None  # the blamed leg's failure (connector/legs/retry.py CAUSES)
        self.first_byte_missed = False  # the watchdog ended the leg at its first-byte deadline
        # the watchdog ended the decode leg: its KV source (this prefill's URL) went down first
        self.kv_lost: str | None = None
        self.attempts: list[dict[str, Any]] = []  # the attempts that failed and were retried
        self.pinned = (
            False  # a canary pinned to one pair (connector/dispatch/canary.py): never retried
        )
        self.first_attempt: float | None = None  # when the first attempt started (queue ends)
        self.attempt_at: float | None = None  # when the serving attempt started (retry ends)
        self.kv_stats: Any = None  # the decode's own `kv_transfer_stats`, as it sent them
        self.ttft_parts = True  # split the TTFT into its parts (domain/measures/ttft_parts.py)
        self.want_parts = False  # the client asked for them at the end of its stream
        self._parts: TtftParts | Literal[False] | None = False  # once made (False: not yet)
        # Bidirectional KV (connector/legs/turn_kv.py): the answer's text pieces while collected
        # (None: not collecting), the decode's returned params, an earlier turn's for the prefill
        self.answer: list[str] | None = None
        self.returned_kv: Any = None
        self.pull_params: dict[str, Any] | None = None
        # A chat request rendered to token ids (connector/dispatch/render_tier.py): the legs' path
        # and the answer's reshaping into the chat shape (connector/legs/chat_shape.py); None: as
        # sent
        self.leg_path: str | None = None
        self.reshape: Any = None

    def attempt_starts(self, now: float) -> None:
        """An attempt (the first, or a retry after its backoff) starts now."""
        self.attempt_at = now
        if self.first_attempt is None:
            self.first_attempt = now

    def next_attempt(self, failed: dict[str, Any]) -> None:
        """A failed attempt is retried: note it and forget what it measured (no byte of it
        reached the client), so the request is measured on the attempt that serves."""
        self.attempts.append(failed)
        self.prefill_start = self.prefill_end = self.end = self.done_at = None
        self.token_times = []
        self.usage_tokens, self.tail, self.malformed, self.kv_stats = None, b"", None, None
        self.usage_prompt = None
        self.answer = [] if self.answer is not None else None
        self.returned_kv = None
        self.timed_out = self.first_byte_missed = self._parts = False
        self.kv_lost = None
        if self.reshape is not None:
            self.reshape.reset()

    def scan(self, chunk: bytes, now: float) -> None:
        """Find complete SSE events in the byte stream; timestamp token events, read usage."""
        data = self.tail + chunk if self.tail else chunk
        start, find = 0, data.find
        while (end := find(b"\n\n", start)) >= 0:
            if data.startswith(b"data:", start) and not _json_shaped(data, start + 5, end):
                self.malformed = data[start : min(end, start + 80)]
                return
            choices = find(b'"choices":', start, end)
            if choices >= 0 and _opens_list_of_objects(data, choices + 10, end):
                self.token_times.append(now)
                if self.answer is not None:
                    self.collect(data[start + 5 : end])
            usage = find(b'"usage":', start, end)
            if usage >= 0 and find(b"null", usage + 8, usage + 14) < 0:
                self._read_usage(data[start:end])
            elif end - start < 16 and find(b"[DONE]", start, end) >= 0:
                self.done_at = now
            start = end + 2
        self.tail = data[start:] if start < len(data) else b""
        if len(self.tail) > MAX_EVENT_BYTES:
            self.malformed = self.tail[:80]

    def collect(self, raw: bytes | Any) -> None:
        """Keep the answer's text and returned kv_transfer_params (bidirectional KV only:
        one JSON parse per event, which the plain path never pays)."""
        try:
            message = json.loads(raw) if isinstance(raw, bytes) else raw
        except (ValueError, RecursionError):
            return
        text, params = answer_part(message)
        if self.answer is not None:
            self.answer.append(text)
        if params is not None:
            self.returned_kv = params

    def _read_usage(self, event: bytes) -> None:
        if not event.startswith(b"data:"):
            return
        try:
            message = json.loads(event[5:])
            usage = message.get("usage") or {}
        except (ValueError, AttributeError):
            return
        self.kv_stats = message.get("kv_transfer_stats")
        self.read_usage(usage)

    def read_usage(self, usage: Any) -> None:
        """The token counts of a usage object (streamed last, or in a whole answer)."""
        if not isinstance(usage, dict):
            return
        if isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
        if isinstance(usage.get("prompt_tokens"), int):
            self.usage_prompt = usage["prompt_tokens"]

    def measure(
        self, outcome: str, slo: SloTargets, now: float
    ) -> tuple[RequestTiming | None, dict[str, bool]]:
        """The request's timing as the client saw it, and which targets it met (ok only)."""
        if outcome != "ok":
            return None, {}
        tokens = self.usage_tokens if self.usage_tokens is not None else len(self.token_times)
        timing = summarize(
            self.arrival,
            self.end or now,
            self.token_times,
            tokens,
            self.prefill_start,
            self.prefill_end,
        )
        timing.parts = self.parts(now)
        return timing, judge(timing, slo)

    def parts(self, now: float) -> TtftParts | None:
        """Where this request's TTFT went, or None (turned off, or no attempt started). Made
        once: the comment after [DONE] and the request log carry the same split."""
        if self._parts is not False:
            return self._parts
        if not self.ttft_parts or self.first_attempt is None or self.attempt_at is None:
            return None
        first = self.token_times[0] if self.token_times else self.end or now
        self._parts = split(
            self.arrival,
            self.first_attempt,
            self.attempt_at,
            self.prefill_end,
            first,
            EngineTransfer.from_json(self.kv_stats),
        )
        return self._parts

    def parts_comment(self, now: float) -> bytes:
        """The parts as an SSE comment (`: ttft_parts {...}`) after [DONE], for a client that
        asked (PARTS_HEADER): SSE readers skip comments, and most stop reading at [DONE]."""
        parts = self.parts(now)
        if parts is None:
            return b""
        return _COMMENT + json.dumps(parts.to_json()).encode() + b"\n\n"


def _json_shaped(data: bytes, i: int, end: int) -> bool:
    """data[i:end] (a data field, after `data:`) opens and closes like JSON: `{...}`, `[...]`."""
    if i < end and data[i] == 0x20:  # the one optional space after the colon
        i += 1
    return i < end and data[i] in b"{[" and data[end - 1] in b"}]"


def _opens_list_of_objects(data: bytes, i: int, end: int) -> bool:
    """True when data[i:] is `[ {` modulo spaces: a non-empty choices list."""
    while i < end and data[i] in b" \t":
        i += 1
    if i >= end or data[i] != 0x5B:  # [
        return False
    i += 1
    while i < end and data[i] in b" \t\r\n":
        i += 1
    return i < end and data[i] == 0x7B  # {
