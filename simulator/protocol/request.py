"""OpenAI-compatible request parsing and vLLM 0.32's refusals (status, type, param, message),
as recorded in tests/fixtures/vllm/error_*.json.

Pure: a body in, a typed request out, or a RequestError that the server renders.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from domain.workload import tokenizer
from simulator.model.encoder import image_url, image_urls, mm_hash, placeholder_ids

# vLLM holds token ids as int32: a larger one is out of any vocabulary (its 400 wording).
MAX_TOKEN_ID = 1 << 31


class PromptTokenizer(Protocol):
    """A model's tokenizer (simulator/protocol/model_tokenizer.py); None: the estimate."""

    def encode(self, text: str) -> list[int]: ...

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]: ...


class RequestError(Exception):
    """A request vLLM would refuse: HTTP status, OpenAI error type and the offending field.

    vLLM has two kinds: FastAPI's body validation (type "Bad Request", param "body.<field>",
    a pydantic-style message; see `validation_error`) and its own checks (type
    "BadRequestError" or "NotFoundError", message ending "(parameter=..., value=...)").
    """

    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        err_type: str = "BadRequestError",
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.err_type = message, status, param, err_type


def error_body(err: RequestError) -> dict[str, Any]:
    return {
        "error": {
            "message": err.message,
            "type": err.err_type,
            "param": err.param,
            "code": err.status,
        }
    }


def validation_error(
    loc: str, kind: str, msg: str, value: Any, ctx: dict[str, Any] | None = None
) -> RequestError:
    """FastAPI's RequestValidationError as vLLM words it: "1 validation error:\\n  {...}"."""
    detail: dict[str, Any] = {"type": kind, "loc": loc, "msg": msg, "input": _summary(value)}
    if ctx is not None:
        detail["ctx"] = ctx
    return RequestError(f"1 validation error:\n  {detail}", param=loc, err_type="Bad Request")


def _summary(value: Any) -> Any:
    if isinstance(value, dict | list):
        return f"<{type(value).__name__} of {len(value)} items>"
    return value


def _checked(message: str, param: str, value: Any = None) -> RequestError:
    """vLLM's own check (VLLMValidationError): the parameter is named at the end of the text."""
    where = f"parameter={param}" + ("" if value is None else f", value={value}")
    return RequestError(f"{message} ({where})", param=param)


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
    images: tuple[str, ...] = ()  # chat image parts' URLs (a multimodal profile's only)
    text_prompt: bool = True  # False: the prompt came as token ids (nothing to tokenize)


def parse(
    kind: str,
    raw: bytes,
    content_type: str,
    served_model: str,
    max_model_len: int,
    vision_tokens: int = 0,
    model_tokenizer: PromptTokenizer | None = None,
) -> GenerationRequest:
    """Validate in vLLM's order: media type, JSON, body fields, model, prompt, max_tokens.
    `vision_tokens`: the prompt tokens an image becomes (0: a text-only model, whose image
    parts are passed over)."""
    if content_type.split(";", 1)[0].strip().lower() != "application/json":
        raise RequestError(
            "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
            err_type="Bad Request",
        )
    body = _json_body(raw)
    if kind == "chat" and "messages" not in body:
        raise validation_error("body.messages", "missing", "Field required", body)
    stream = _bool(body, "stream")
    limit = _int(body, "max_completion_tokens") if kind == "chat" else None
    limit = limit if limit is not None else _int(body, "max_tokens")
    model = body.get("model")
    if model is not None and model != served_model:
        raise RequestError(
            f"The model `{model}` does not exist. Valid aliases: {served_model}.",
            status=404,
            param="model",
            err_type="NotFoundError",
        )
    images: tuple[str, ...] = ()
    if kind == "chat":
        images = tuple(image_urls(body["messages"])) if vision_tokens else ()
        prompt_ids = _chat_prompt(
            body["messages"], vision_tokens if images else 0, served_model, model_tokenizer
        )
    else:
        prompt_ids = _completion_prompt(body.get("prompt"), model_tokenizer)
    if len(prompt_ids) > max_model_len:
        # vLLM tokenizes at most max_model_len + 1 tokens, hence "at least".
        seen = min(len(prompt_ids), max_model_len + 1)
        raise _checked(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains at least {seen} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            "input_tokens",
            seen,
        )
    max_tokens = _max_tokens(limit, len(prompt_ids), max_model_len)
    if body.get("n", 1) != 1:
        raise RequestError("The stand-in engine serves n=1 only", param="n")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise validation_error(
            "body.stream_options",
            "model_type",
            "Input should be a valid dictionary or instance of StreamOptions",
            options,
        )
    if options and not stream:
        raise RequestError(
            "Stream options can only be defined when `stream=True`.", param="stream_options"
        )
    params = body.get("kv_transfer_params")
    if params is not None and not isinstance(params, dict):
        raise validation_error(
            "body.kv_transfer_params", "dict_type", "Input should be a valid dictionary", params
        )
    return GenerationRequest(
        kind=kind,
        model=served_model,
        prompt_token_ids=prompt_ids,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
        ignore_eos=bool(body.get("ignore_eos", False)),
        kv_transfer_params=params,
        text_prompt=kind == "chat" or not _token_ids(body.get("prompt")),
        echo=bool(body.get("echo", False)) and kind == "completion",
        images=images,
    )


def _json_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise validation_error(
            f"body.{exc.pos}", "json_invalid", "JSON decode error", {}, {"error": exc.msg}
        ) from None
    except UnicodeDecodeError:
        raise validation_error(
            "body.0", "json_invalid", "JSON decode error", {}, {"error": "Invalid UTF-8"}
        ) from None
    if not isinstance(body, dict):
        raise validation_error(
            "body",
            "model_attributes_type",
            "Input should be a valid dictionary or object to extract fields from",
            body,
        )
    return body


def _int(body: dict[str, Any], field: str) -> int | None:
    """Pydantic's lax int: integral floats and numeric strings pass, anything else is a 400."""
    value = body.get(field)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise validation_error(
                f"body.{field}",
                "int_parsing",
                "Input should be a valid integer, unable to parse string as an integer",
                value,
            ) from None
    raise validation_error(f"body.{field}", "int_type", "Input should be a valid integer", value)


def _bool(body: dict[str, Any], field: str) -> bool:
    value = body.get(field)
    if value is None or isinstance(value, bool):
        return bool(value)
    raise validation_error(f"body.{field}", "bool_type", "Input should be a valid boolean", value)


def _token_ids(prompt: Any) -> bool:
    """Whether a completion's prompt is token ids (alone, or a batch of one)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    return isinstance(prompt, list) and not any(isinstance(t, str | list) for t in prompt)


def _completion_prompt(prompt: Any, model_tokenizer: PromptTokenizer | None = None) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        ids = model_tokenizer.encode(prompt) if model_tokenizer else tokenizer.encode(prompt)
    elif isinstance(prompt, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    ):
        if any(t < 0 for t in prompt):
            raise RequestError("prompt token ids must be non-negative", param="prompt")
        if prompt and max(prompt) >= MAX_TOKEN_ID:
            raise RequestError(f"Token id {max(prompt)} is out of vocabulary", param="prompt")
        ids = list(prompt)
    elif prompt is None:
        ids = []
    else:
        raise RequestError(
            "prompt must be a string or a list of token ids (one prompt)", param="prompt"
        )
    if not ids:
        raise _checked("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
    return ids


def _chat_prompt(
    messages: Any,
    vision_tokens: int = 0,
    model: str = "",
    model_tokenizer: PromptTokenizer | None = None,
) -> list[int]:
    if not isinstance(messages, list):
        raise validation_error(
            "body.messages", "list_type", "Input should be a valid list", messages
        )
    if not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    ids: list[int] = []
    texts: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise RequestError(
                f"messages[{i}] must be an object with a role", param=f"messages[{i}]"
            )
        content = message.get("content") or ""
        images: list[int] = []
        if isinstance(content, list) and vision_tokens:  # each image: its vision tokens
            for url in filter(None, map(image_url, content)):
                images += placeholder_ids(mm_hash(model, url), vision_tokens)
        if isinstance(content, list):  # content parts: keep the text ones
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise RequestError(
                f"messages[{i}].content must be a string", param=f"messages[{i}].content"
            )
        texts.append({"role": str(message["role"]), "content": content})
        if model_tokenizer is not None:
            ids.extend(images)  # the model's template renders the text below
            continue
        # A tiny chat template: one token for the role (a special token in a real template),
        # then the content's tokens.
        ids.extend(tokenizer.encode(str(message["role"]))[:1])
        ids.extend(images)
        ids.extend(tokenizer.encode(content))
    if model_tokenizer is not None:
        return model_tokenizer.encode_chat(texts) + ids
    ids.extend(tokenizer.encode("assistant")[:1])
    return ids


def _max_tokens(limit: int | None, prompt_len: int, max_model_len: int) -> int:
    """vLLM 0.32 refuses only max_tokens > max_model_len and otherwise clamps to the room left
    after the prompt (get_max_tokens); max_completion_tokens is checked under the same name."""
    if limit is not None and limit > max_model_len:
        raise _checked(
            f"max_tokens={limit} cannot be greater than max_model_len="
            f"{max_model_len}. Please request fewer output tokens.",
            "max_tokens",
            limit,
        )
    room = max_model_len - prompt_len
    max_tokens = room if limit is None else min(limit, room)
    if max_tokens < 1:
        raise _checked(
            f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens
        )
    return max_tokens
