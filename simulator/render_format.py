"""Pure: the render tier's shapes, as vLLM's scale-out API has them (PROTOCOL.md section 4b).

Render: an OpenAI request in, vLLM's `GenerateRequest` out (`request_id`, `token_ids`,
`sampling_params`, `model`, `stream`, `stream_options`, `kv_transfer_params`, ...); the
completions route answers a list of them (one per prompt), the chat route one.
Derender: a `GenerateResponse` (`choices[].token_ids`, `finish_reason`) in, the OpenAI
response out; streaming, one generate chunk plus the caller-carried `stream_state` in,
`{"chunk": <OpenAI stream chunk>, "stream_state": ...}` out, with no state on the server.

The stand-in's tokenizer (domain/tokenizer.py) is the engines' too, so the render tier and the
engines agree on every token, and the text derendered is the text the engine would have sent.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from domain import tokenizer
from simulator.openai_format import ResponseWriter
from simulator.openai_request import GenerationRequest, RequestError


def generate_request(req: GenerationRequest, body: dict[str, Any]) -> dict[str, Any]:
    """vLLM's GenerateRequest for one parsed request: what an engine generates on."""
    prefix = "chatcmpl-" if req.kind == "chat" else "cmpl-"
    return {
        "request_id": prefix + uuid.uuid4().hex,
        "token_ids": req.prompt_token_ids,
        "features": None,
        "sampling_params": {
            "n": 1,
            "max_tokens": req.max_tokens,
            "temperature": body.get("temperature", 1.0),
            "top_p": body.get("top_p", 1.0),
            "ignore_eos": req.ignore_eos,
            "skip_special_tokens": True,
            "detokenize": True,
        },
        "model": req.model,
        "stream": req.stream,
        "stream_options": body.get("stream_options") if req.stream else None,
        "cache_salt": body.get("cache_salt"),
        "priority": body.get("priority", 0),
        "kv_transfer_params": req.kv_transfer_params,
    }


def output_text(token_ids: list[int], first: bool = True) -> str:
    """The text the stand-in engine streams for these output tokens (`first`: no token went
    out before them, so no leading space)."""
    return "".join(tokenizer.token_text(t, first and i == 0) for i, t in enumerate(token_ids))


def _choice_ids(response: Any, where: str) -> tuple[list[int], str | None]:
    if not isinstance(response, dict) or not isinstance(response.get("choices"), list):
        raise RequestError(f"{where} must be a GenerateResponse with choices", param=where)
    if len(response["choices"]) != 1:
        raise RequestError("the stand-in derenders n=1 only", param=f"{where}.choices")
    choice = response["choices"][0]
    ids = choice.get("token_ids") if isinstance(choice, dict) else None
    if not isinstance(ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids
    ):
        raise RequestError(
            "token_ids must be a list of non-negative integers",
            param=f"{where}.choices.0.token_ids",
        )
    return ids, choice.get("finish_reason")


def _writer(kind: str, model: str, include_usage: bool = False) -> ResponseWriter:
    req = GenerationRequest(kind, model, [], 0, True, include_usage, False, None)
    return ResponseWriter(req, fingerprint="")


def derender(kind: str, body: dict[str, Any], model: str) -> dict[str, Any]:
    """A whole GenerateResponse as the OpenAI response vLLM would have answered."""
    if kind == "chat":
        responses, counts = [body.get("generate_response")], [body.get("prompt_tokens")]
        where = "generate_response"
    else:
        responses, counts = body.get("generate_responses"), body.get("prompt_tokens")
        where = "generate_responses"
        if not isinstance(responses, list) or not responses:
            raise RequestError("generate_responses must be a non-empty list", param=where)
        counts = counts if counts is not None else [None] * len(responses)
        if not isinstance(counts, list) or len(counts) != len(responses):
            raise RequestError(
                f"prompt_tokens length must equal generate_responses length ({len(responses)})",
                param="prompt_tokens",
            )
    if len(responses) != 1:
        raise RequestError("the stand-in derenders one prompt per request", param=where)
    ids, finish = _choice_ids(responses[0], where)
    if kind == "chat" and not ids:
        raise RequestError("token_ids must not be empty", param=f"{where}.choices.0.token_ids")
    prompt_tokens = counts[0] or 0
    out = _writer(kind, model).body(
        output_text(ids),
        finish or "stop",
        prompt_tokens,
        len(ids),
        responses[0].get("kv_transfer_params"),
    )
    out["id"] = responses[0].get("request_id") or out["id"]
    return out


def derender_chunk(kind: str, body: dict[str, Any], model: str) -> dict[str, Any]:
    """One streamed generate chunk as the OpenAI stream chunk, and the state for the next."""
    chunk = body.get("generate_chunk")
    ids, finish = _choice_ids(chunk, "generate_chunk")
    state = body.get("stream_state") or {}
    if not isinstance(state, dict):
        raise RequestError("stream_state must be an object or null", param="stream_state")
    seen = state.get("prev_tokens") or []
    writer = _writer(kind, model)
    writer.id = chunk.get("request_id") or writer.id
    text = output_text(ids, first=not seen)
    if finish is not None:
        raw = writer.last_chunk(text, finish, chunk.get("kv_transfer_params"))
    else:
        raw = writer.token_chunk(text)
    out = json.loads(raw[len(b"data: ") :])
    out["id"] = writer.id
    if kind == "chat" and not state.get("role_sent"):
        out["choices"][0]["delta"] = {"role": "assistant", **out["choices"][0]["delta"]}
    if isinstance(chunk.get("usage"), dict):
        out["usage"] = chunk["usage"]
    last = [tokenizer.token_text(ids[-1], not seen and len(ids) == 1)] if ids else seen[-1:]
    return {
        "chunk": out,
        "stream_state": {
            "prev_tokens": last,
            "prefix_offset": 0,
            "read_offset": len(last),
            "role_sent": True,
        },
    }
