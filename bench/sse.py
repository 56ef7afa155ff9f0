"""Reading OpenAI-style server-sent events the way `vllm bench serve` counts tokens.

Every `data:` message whose `choices` carry text (completions) or delta content (chat) is a
token event; the usage chunk carries the token counts; `{"error": ...}` ends the request.
Pure: one SSE line in, one `StreamEvent` out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StreamEvent:
    """What one SSE line means for the measurement."""

    token: bool = False
    done: bool = False
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


NOTHING = StreamEvent()


def parse_line(line: str) -> StreamEvent:
    """Interpret one line of the stream; blank lines, comments and other fields mean nothing."""
    line = line.strip()
    if not line.startswith("data:"):
        return NOTHING
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return StreamEvent(done=True)
    try:
        message = json.loads(data)
    except ValueError:
        return StreamEvent(error=f"malformed SSE message: {data[:200]!r}")
    if not isinstance(message, dict):
        return StreamEvent(error=f"unexpected SSE message: {data[:200]!r}")
    if "error" in message:
        return StreamEvent(error=error_message(message["error"]))
    usage = message.get("usage") or {}
    return StreamEvent(
        token=_has_text(message.get("choices")),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
    )


def error_message(error: Any) -> str:
    """The human part of an OpenAI/vLLM error body, whatever shape it came in."""
    if isinstance(error, dict):
        for key in ("message", "detail", "error"):
            if key in error:
                return error_message(error[key])
        return json.dumps(error)[:300]
    return str(error)[:300]


def _has_text(choices: Any) -> bool:
    # An empty string is not a token: vLLM's chat stream opens with a role-only delta and
    # closes with a finish_reason chunk, and counting those would bias TTFT and ITL low.
    if not choices or not isinstance(choices, list):
        return False
    choice = choices[0]
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    if isinstance(delta, dict):
        text = delta.get("content") or delta.get("reasoning_content")
    else:
        text = choice.get("text")
    return isinstance(text, str) and text != ""
