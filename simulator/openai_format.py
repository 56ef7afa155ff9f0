"""OpenAI-compatible request parsing and response shapes, as vLLM's API server writes them.

Pure: bodies in, typed requests or byte strings out. Stream chunks are built from
pre-rendered prefixes so that one token costs one `json.dumps` of its text.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from simulator import tokenizer


class RequestError(Exception):
    """A request vLLM would refuse: HTTP status, OpenAI error type and the offending field."""

    def __init__(self, message: str, status: int = 400, param: str | None = None,
                 err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.err_type = message, status, param, err_type


def error_body(err: RequestError) -> dict[str, Any]:
    return {"error": {"message": err.message, "type": err.err_type, "param": err.param,
                      "code": err.status}}


@dataclass(slots=True)
class GenerationRequest:
    kind: str  # "completion" | "chat"
    model: str
    prompt_token_ids: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool
    ignore_eos: bool
    kv_transfer_params: dict[str, Any] | None
    echo: bool = False


def parse(kind: str, raw: bytes, served_model: str, max_model_len: int) -> GenerationRequest:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"Invalid JSON body: {exc}", param="body") from None
    if not isinstance(body, dict):
        raise RequestError("Request body must be a JSON object", param="body")
    model = body.get("model")
    if model is not None and model != served_model:
        raise RequestError(f"The model `{model}` does not exist.", status=404, param="model",
                           err_type="NotFoundError")
    if kind == "chat":
        prompt_ids = _chat_prompt(body.get("messages"))
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
    else:
        prompt_ids = _completion_prompt(body.get("prompt"))
        limit = body.get("max_tokens", 16)
    if len(prompt_ids) > max_model_len:
        raise RequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {len(prompt_ids)} input tokens. Please reduce the length of the "
            "input messages.", param="prompt" if kind == "completion" else "messages")
    max_tokens = _max_tokens(limit, len(prompt_ids), max_model_len, kind)
    n = body.get("n", 1)
    if n != 1:
        raise RequestError("The stand-in engine serves n=1 only", param="n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("stream must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("stream_options must be an object", param="stream_options")
    if options and not stream:
        raise RequestError("Stream options can only be defined when `stream=True`.",
                           param="stream_options")
    params = body.get("kv_transfer_params")
    if params is not None and not isinstance(params, dict):
        raise RequestError("kv_transfer_params must be an object", param="kv_transfer_params")
    return GenerationRequest(
        kind=kind,
        model=served_model,
        prompt_token_ids=prompt_ids,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
        ignore_eos=bool(body.get("ignore_eos", False)),
        kv_transfer_params=params,
        echo=bool(body.get("echo", False)) and kind == "completion",
    )


def _completion_prompt(prompt: Any) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                          for t in prompt):
        if any(t < 0 for t in prompt):
            raise RequestError("prompt token ids must be non-negative", param="prompt")
        ids = list(prompt)
    elif prompt is None:
        raise RequestError("Either prompt or prompt_embeds must be provided and non-empty.",
                           param="prompt")
    else:
        raise RequestError("prompt must be a string or a list of token ids (one prompt)",
                           param="prompt")
    if not ids:
        raise RequestError("Either prompt or prompt_embeds must be provided and non-empty.",
                           param="prompt")
    return ids


def _chat_prompt(messages: Any) -> list[int]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    ids: list[int] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise RequestError(f"messages[{i}] must be an object with a role",
                               param=f"messages[{i}]")
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts: keep the text ones
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}].content must be a string",
                               param=f"messages[{i}].content")
        # A tiny chat template: one token for the role, then the content's tokens.
        ids.extend(tokenizer.encode(str(message["role"])))
        ids.extend(tokenizer.encode(content))
    ids.extend(tokenizer.encode("assistant"))
    return ids


def _max_tokens(limit: Any, prompt_len: int, max_model_len: int, kind: str) -> int:
    room = max_model_len - prompt_len
    param = "max_tokens" if kind == "completion" else "max_completion_tokens"
    if limit is None:
        return max(1, room)
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise RequestError(f"{param} must be an integer", param=param)
    if limit < 1:
        raise RequestError(f"{param} must be at least 1, got {limit}.", param=param)
    if limit > room:
        raise RequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_len + limit} tokens ({prompt_len} in the messages, {limit} in "
            "the completion). Please reduce the length of the messages or completion.",
            param=param)
    return limit


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens, "prompt_tokens_details": None}


class ResponseWriter:
    """Renders one request's responses: whole bodies or SSE chunks."""

    def __init__(self, req: GenerationRequest, request_id: str | None = None) -> None:
        self.req = req
        prefix = "chatcmpl-" if req.kind == "chat" else "cmpl-"
        self.id = request_id or prefix + uuid.uuid4().hex
        self.created = int(time.time())
        head = {"id": self.id, "object": self._object(stream=True), "created": self.created,
                "model": req.model}
        opening = json.dumps(head, separators=(",", ":"))[:-1]
        tail = ',"usage":null}' if req.include_usage else "}"
        if req.kind == "chat":
            self._token_prefix = 'data: ' + opening + ',"choices":[{"index":0,"delta":{"content":'
            self._token_suffix = '},"logprobs":null,"finish_reason":null}]' + tail + "\n\n"
        else:
            self._token_prefix = 'data: ' + opening + ',"choices":[{"index":0,"text":'
            self._token_suffix = (',"logprobs":null,"finish_reason":null,"stop_reason":null}]'
                                  + tail + "\n\n")
        self._opening = opening

    def _object(self, stream: bool) -> str:
        if self.req.kind == "chat":
            return "chat.completion.chunk" if stream else "chat.completion"
        return "text_completion"

    def role_chunk(self) -> bytes:
        """Chat streams open with the assistant role (vLLM sends it before any token)."""
        tail = ',"usage":null}' if self.req.include_usage else "}"
        return ('data: ' + self._opening + ',"choices":[{"index":0,"delta":{"role":"assistant",'
                '"content":""},"logprobs":null,"finish_reason":null}]' + tail + "\n\n").encode()

    def token_chunk(self, text: str) -> bytes:
        return (self._token_prefix + json.dumps(text) + self._token_suffix).encode()

    def finish_chunk(self, finish_reason: str, kv_params: dict | None = None) -> bytes:
        if self.req.kind == "chat":
            choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish_reason,
                      "stop_reason": None}
        else:
            choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": finish_reason,
                      "stop_reason": None}
        body: dict[str, Any] = {"id": self.id, "object": self._object(True),
                                "created": self.created, "model": self.req.model,
                                "choices": [choice]}
        if self.req.include_usage:
            body["usage"] = None
        if kv_params is not None:
            body["kv_transfer_params"] = kv_params
        return _sse(body)

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        body = {"id": self.id, "object": self._object(True), "created": self.created,
                "model": self.req.model, "choices": [],
                "usage": usage(prompt_tokens, completion_tokens)}
        return _sse(body)

    def error_chunk(self, message: str, status: int = 500) -> bytes:
        return _sse({"error": {"message": message, "type": "InternalServerError", "param": None,
                               "code": status}})

    def body(self, text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int,
             kv_params: dict | None) -> dict[str, Any]:
        if self.req.kind == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None,
                            "annotations": None, "audio": None, "function_call": None,
                            "tool_calls": [], "reasoning_content": None},
                "logprobs": None, "finish_reason": finish_reason, "stop_reason": None,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None,
                      "finish_reason": finish_reason, "stop_reason": None,
                      "prompt_logprobs": None}
        return {"id": self.id, "object": self._object(False), "created": self.created,
                "model": self.req.model, "choices": [choice],
                "usage": usage(prompt_tokens, completion_tokens),
                "kv_transfer_params": kv_params}


DONE = b"data: [DONE]\n\n"


def _sse(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def models_body(served_model: str, max_model_len: int, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{
        "id": served_model, "object": "model", "created": created, "owned_by": "vllm",
        "root": served_model, "parent": None, "max_model_len": max_model_len,
        "permission": [],
    }]}
