"""Reading OpenAI-style server-sent events the way `vllm bench serve` counts tokens.

A completions message whose `choices` is not empty is one token, even when its text is empty
(vLLM streams an empty text for a token that ends inside a multi-byte character, and for the
EOS token): one message per engine step, as vLLM's client counts. A chat message is a token
when its delta carries content or reasoning; the role-only opening delta is not (vLLM's
client counts it, which adds one near-zero gap per request). The usage chunk carries the token
counts; `{"error": ...}` ends the request. Pure: `LineSplitter` turns the bytes of a stream
into lines, `parse_line` one line into a `StreamEvent`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from domain.measures import per_request_metrics
from domain.measures.ttft_parts import PARTS_COMMENT

MAX_LINE_BYTES = 1 << 20  # an SSE line this long without a newline is a broken stream


@dataclass(frozen=True)
class StreamEvent:
    """What one SSE line means for the measurement."""

    token: bool = False
    done: bool = False
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # the answering engine's own timing for this request, in ms (vLLM's
    # --enable-per-request-metrics: `metrics` on the usage chunk); None when it sent none
    engine_metrics: dict[str, float] | None = None


NOTHING = StreamEvent()
DONE = StreamEvent(done=True)
TOKEN = StreamEvent(token=True)


class LineSplitter:
    """The complete lines in the chunks of a byte stream, in order, as they arrive.

    The client hands it each chunk the socket gave (aiohttp's `iter_any`) and stamps the
    lines with that chunk's arrival time, so no token waits for a line-by-line reader."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        lines = (self._rest + chunk).split(b"\n")
        self._rest = lines.pop()
        if len(self._rest) > MAX_LINE_BYTES:
            raise ValueError(f"an SSE line longer than {MAX_LINE_BYTES} bytes")
        return lines

    def rest(self) -> bytes:
        """What followed the last newline: a stream's final line when it ended without one."""
        rest, self._rest = self._rest, b""
        return rest


def parse_line(line: str | bytes) -> StreamEvent:
    """Interpret one line of the stream; blank lines, comments and other fields mean nothing."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    line = line.strip()
    if not line.startswith("data:"):
        return NOTHING
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return DONE
    try:
        message = json.loads(data)
    except ValueError:
        return StreamEvent(error=f"malformed SSE message: {data[:200]!r}")
    if not isinstance(message, dict):
        return StreamEvent(error=f"unexpected SSE message: {data[:200]!r}")
    if "error" in message:
        return StreamEvent(error=error_message(message["error"]))
    usage = message.get("usage")
    token = _is_token(message.get("choices"))
    if not usage:
        return TOKEN if token else NOTHING
    return StreamEvent(
        token=token,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        engine_metrics=per_request_metrics.read(message.get("metrics")),
    )


def error_message(error: Any) -> str:
    """The human part of an OpenAI/vLLM error body, whatever shape it came in."""
    if isinstance(error, dict):
        for key in ("message", "detail", "error"):
            if key in error:
                return error_message(error[key])
        return json.dumps(error)[:300]
    return str(error)[:300]


def _is_token(choices: Any) -> bool:
    if not choices or not isinstance(choices, list):
        return False
    choice = choices[0]
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    if isinstance(delta, dict):
        text = delta.get("content") or delta.get("reasoning_content")
        return isinstance(text, str) and text != ""
    return isinstance(choice.get("text"), str)


def ttft_parts(line: str | bytes) -> dict[str, Any] | None:
    """The TTFT's parts a pdctl proxy sends after [DONE] as one comment line, else None."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    if not line.startswith(PARTS_COMMENT):
        return None
    try:
        parts = json.loads(line[len(PARTS_COMMENT) :])
    except ValueError:
        return None
    return parts if isinstance(parts, dict) else None
