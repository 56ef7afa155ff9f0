"""Pure: the client's request body as the proxy needs it (checked just enough to route it),
token estimates for load balancing, and upstream errors as the client's errors."""

from __future__ import annotations

import json
from typing import Any

from connector.errors import BadRequest, ProxyError, UpstreamError, UpstreamRefused
from connector.legs.retry import STALE_ROLE

DEFAULT_MAX_TOKENS = 256  # load estimate only, when the client sets none


def parse_client_body(raw: bytes, endpoint: str) -> dict[str, Any]:
    """The client's JSON body, checked just enough to route it; BadRequest names the field."""
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}", "body") from None
    except RecursionError:
        raise BadRequest("request body is not valid JSON: nested too deeply", "body") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object", "body")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise BadRequest("field 'model' is required and must be a string", "model")
    if endpoint.endswith("/chat/completions"):
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            raise BadRequest(
                "field 'messages' is required and must be a non-empty list", "messages"
            )
    elif body.get("prompt") in (None, "", []):
        raise BadRequest("field 'prompt' is required", "prompt")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise BadRequest(f"field '{key}' must be a positive integer", key)
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("field 'stream' must be true or false", "stream")
    return body


def turn_kind(body: dict[str, Any], endpoint: str) -> str:
    """`follow_up` for a chat request that carries an earlier assistant answer (a conversation
    or agent loop going on), `first` for another chat request, `unknown` for a completion
    (a prompt string cannot say)."""
    if not endpoint.endswith("/chat/completions"):
        return "unknown"
    for message in body["messages"]:
        if isinstance(message, dict) and message.get("role") == "assistant":
            return "follow_up"
    return "first"


def estimate_tokens(body: dict[str, Any]) -> tuple[int, int]:
    """(prompt, output) token estimates for load balancing: about 4 characters a token."""
    prompt = body.get("prompt") if "prompt" in body else body.get("messages")
    prompt_tokens = len(prompt) // 4 if isinstance(prompt, str) else len(str(prompt)) // 4
    output = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
    return max(1, prompt_tokens), int(output)


def asked_tokens(body: dict[str, Any]) -> int | None:
    """The answer's bound the client set (checked by parse_client_body), None when unset."""
    value = body.get("max_completion_tokens") or body.get("max_tokens")
    return value if isinstance(value, int) else None


def upstream_failure(leg: str, instance: str, status: int, raw: bytes) -> ProxyError:
    """A leg's non-200 answer as the client's error: the engine refusing the request (a 4xx
    about the body) is the client's 4xx with the engine's message; anything else is a 502."""
    if (
        status == 409
    ):  # a role-switching instance fenced it: routed again (connector/pool/pd_roles.py)
        return UpstreamError(leg, instance, f"HTTP 409: {upstream_message(raw)}", STALE_ROLE)
    if status not in UpstreamRefused.STATUSES:
        return UpstreamError(leg, instance, f"HTTP {status}: {upstream_message(raw)}")
    param = None
    try:
        parsed = json.loads(raw)
        error = parsed.get("error") if isinstance(parsed, dict) else None
        param = error.get("param") if isinstance(error, dict) else None
    except (ValueError, RecursionError):
        pass
    return UpstreamRefused(
        leg, instance, status, upstream_message(raw), param if isinstance(param, str) else None
    )


def upstream_message(raw: bytes) -> str:
    """The upstream's error message (vLLM's JSON or plain text), kept short."""
    try:
        parsed = json.loads(raw)
        error = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        message = error.get("message") if isinstance(error, dict) else None
        text = str(message if message is not None else error)
    except (ValueError, RecursionError):
        text = raw.decode(errors="replace")
    return text.strip()[:300] or "(empty body)"
