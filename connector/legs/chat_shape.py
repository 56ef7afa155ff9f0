"""Pure: a chat request served on token ids. With a render tier (connector/dispatch/render_tier.py)
a chat
request is rendered to its prompt's token ids (its chat template applied there) and the legs go
to the engines' /v1/completions with those ids; the engines answer in the completion shape, and
this turns that answer into the chat shape vLLM's /v1/chat/completions writes: the stream
opens with the assistant's role, each token's `text` becomes `delta.content`, the ids and
objects are the chat ones; usage, finish_reason and kv_transfer_params pass as they came.

`ChatShape.chunk` takes the upstream's bytes as they arrive (events may split anywhere) and
gives whole chat events; anything that is not a JSON event passes unchanged, so the proxy's
scan still finds garbage.
"""

from __future__ import annotations

import json
from typing import Any

COMPLETIONS = "/v1/completions"
_MESSAGE_NULLS = ("refusal", "annotations", "audio", "function_call", "reasoning")


def legs_body(body: dict[str, Any], token_ids: list[int]) -> dict[str, Any]:
    """The completion request the legs send for a chat body: the rendered ids as the prompt,
    max_completion_tokens as max_tokens (the chat name of the same limit)."""
    out = {k: v for k, v in body.items() if k not in ("messages", "max_completion_tokens")}
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        out["max_tokens"] = limit
    out["prompt"] = token_ids
    return out


def _chat_id(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("cmpl-"):
        return "chat" + value
    return value


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def whole(raw: bytes) -> bytes:
    """A whole text_completion body as the chat.completion body."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        return raw
    body["id"], body["object"] = _chat_id(body.get("id")), "chat.completion"
    for choice in body["choices"]:
        if isinstance(choice, dict):
            message = {"role": "assistant", "content": choice.pop("text", "")}
            message.update(dict.fromkeys(_MESSAGE_NULLS))
            choice.pop("prompt_logprobs", None)
            choice.pop("prompt_token_ids", None)
            choice["message"] = message
    return _dumps(body)


class ChatShape:
    """One streamed answer's reshaping; `reset` starts it again (a retried attempt)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.tail = b""
        self.role_sent = False

    def chunk(self, data: bytes) -> bytes:
        data = self.tail + data if self.tail else data
        out, start = [], 0
        while (end := data.find(b"\n\n", start)) >= 0:
            out.append(self._event(data[start:end]))
            start = end + 2
        self.tail = data[start:]
        return b"".join(out)

    def _event(self, event: bytes) -> bytes:
        if not event.startswith(b"data: {"):
            return event + b"\n\n"
        try:
            message = json.loads(event[6:])
        except (ValueError, RecursionError):
            return event + b"\n\n"
        choices = message.get("choices") if isinstance(message, dict) else None
        if not isinstance(choices, list):
            return event + b"\n\n"
        message["id"] = _chat_id(message.get("id"))
        message["object"] = "chat.completion.chunk"
        head = b""
        if choices and not self.role_sent:
            self.role_sent = True
            role = {k: message[k] for k in ("id", "object", "created", "model") if k in message}
            role["choices"] = [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ]
            head = b"data: " + _dumps(role) + b"\n\n"
        for choice in choices:
            if isinstance(choice, dict):
                choice["delta"] = {"content": choice.pop("text", "")}
                choice.pop("prompt_token_ids", None)
        return head + b"data: " + _dumps(message) + b"\n\n"
