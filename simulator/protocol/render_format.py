"""Pure: the render tier's shapes, as vLLM's scale-out API has them (PROTOCOL.md section 4b).

Render: an OpenAI request in, vLLM's `GenerateRequest` out (`request_id`, `token_ids`,
`sampling_params`, `model`, `stream`, `stream_options`, `kv_transfer_params`, ...); the
completions route answers a list of them (one per prompt), the chat route one.
Derender: a `GenerateResponse` (`choices[].token_ids`, `finish_reason`) in, the OpenAI
response out; streaming, one generate chunk plus the caller-carried `stream_state` in,
`{"chunk": <OpenAI stream chunk>, "stream_state": ...}` out, with no state on the server.

The stand-in's tokenizer (domain/workload/tokenizer.py) is the engines' too, so the render tier and
the
engines agree on every token, and the text derendered is the text the engine would have sent.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from domain.workload import tokenizer
from simulator.protocol.format import ResponseWriter
from simulator.protocol.request import GenerationRequest, RequestError


def generate_request(req: GenerationRequest, body: dict[str, Any]) -> dict[str, Any]:
    """vLLM's GenerateRequest for one parsed request: what an engine generates on. Keys as
    vLLM 0.32's render server answers (tests/fixtures/vllm/render_tier); its sampling_params
    leave out what is at vLLM's default (ignore_eos appears only when set)."""
    prefix = "chatcmpl-" if req.kind == "chat" else "cmpl-"
    sampling: dict[str, Any] = {
        "presence_penalty": body.get("presence_penalty", 0.0),
        "frequency_penalty": body.get("frequency_penalty", 0.0),
        "repetition_penalty": body.get("repetition_penalty", 1.0),
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "min_p": body.get("min_p", 0.0),
        "stop": [],
        "stop_token_ids": [],
        "max_tokens": req.max_tokens,
        "output_kind": 1 if req.stream else 2,  # vLLM's RequestOutputKind: DELTA, FINAL_ONLY
        "skip_clone": True,
        "bad_words": [],
        "skip_reading_prefix_cache": False,
    }
    if req.ignore_eos:
        sampling["ignore_eos"] = True
    return {
        "request_id": prefix + uuid.uuid4().hex[:16],
        "token_ids": req.prompt_token_ids,
        "token_offsets": None,
        "features": None,
        "content_parts": None,
        "sampling_params": sampling,
        "model": req.model,
        "reasoning_ended": None,
        "reasoning_parser_kwargs": None,
        "return_token_ids": None,
        "output_mode": "tokens",
        "stream": req.stream,
        "stream_options": body.get("stream_options") if req.stream else None,
        "cache_salt": body.get("cache_salt"),
        "priority": body.get("priority", 0),
        "kv_transfer_params": req.kv_transfer_params,
        "ec_transfer_params": None,
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
    responses: Any  # JSON until checked: a list, and _choice_ids checks its first item
    counts: Any
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
    out["system_fingerprint"] = None  # a render server runs no engine config
    return out


def derender_chunk(kind: str, body: dict[str, Any], model: str) -> dict[str, Any]:
    """One streamed generate chunk as the OpenAI stream chunk, and the state for the next
    (vLLM's DerenderStreamState keys; the stand-in's tokenizer needs only whether a token went
    out before, which `prev_tokens` says)."""
    chunk: Any = body.get("generate_chunk")  # a dict once _choice_ids has checked it
    ids, finish = _choice_ids(chunk, "generate_chunk")
    state = body.get("stream_state") or {}
    if not isinstance(state, dict):
        raise RequestError("stream_state must be an object or null", param="stream_state")
    seen = state.get("prev_tokens") or []
    text = output_text(ids, first=not seen)
    chat = kind == "chat"
    choice: dict[str, Any] = {"index": 0}
    if chat:
        delta: dict[str, Any] = {} if state.get("role_sent") else {"role": "assistant"}
        choice["delta"] = {**delta, "content": text, "reasoning": None}
        choice.update(logprobs=None, finish_reason=finish, stop_reason=None, token_ids=None)
    else:
        choice.update(text=text, logprobs=None, finish_reason=finish, stop_reason=None)
        choice.update(prompt_token_ids=None, token_ids=None)
    out: dict[str, Any] = {
        "id": chunk.get("request_id") or ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": chunk.get("usage") if isinstance(chunk.get("usage"), dict) else None,
        "system_fingerprint": None,
    }
    if chat:
        out.update(prompt_token_ids=None, prompt_text=None)
    out["metrics"] = None
    if chunk.get("kv_transfer_params") is not None:
        out["kv_transfer_params"] = chunk["kv_transfer_params"]
    last = [tokenizer.token_text(ids[-1], not seen and len(ids) == 1)] if ids else seen[-1:]
    offset = int(state.get("logprob_text_offset") or 0) + (0 if chat else len(text))
    return {
        "chunk": out,
        "stream_state": {
            "prev_tokens": last,
            "prefix_offset": 0,
            "read_offset": len(last),
            "role_sent": chat,
            "logprob_context_token_ids": ([*state.get("logprob_context_token_ids", []), *ids])[-4:],
            "logprob_text_offset": offset,
            "output_token_ids": [],
            "output_chunk_lens": [],
            "tools_streamed": False,
            "last_tool_call_ids": [],
        },
    }
