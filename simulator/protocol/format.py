"""OpenAI-compatible response shapes, as vLLM 0.32's API server writes them (real transcripts
in tests/fixtures/vllm; tests/simulator/test_conformance.py compares).

Pure: results in, bodies or byte strings out. Stream chunks are built from pre-rendered
prefixes so that one token costs one `json.dumps` of its text.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from simulator.protocol.request import GenerationRequest

VLLM_VERSION = "0.32.0"


def system_fingerprint(config: str) -> str:
    """vLLM's `vllm-<version>-<8 hex>`: fixed for one engine config, not random per start."""
    return f"vllm-{VLLM_VERSION}-{uuid.uuid5(uuid.NAMESPACE_OID, config).hex[:8]}"


def internal_request_id(kind: str, public_id: str) -> str:
    """The engine's own id (NIXL's remote_request_id): cmpl-X-0-<8 hex>, chatcmpl-X-<8 hex>."""
    suffix = uuid.uuid4().hex[:8]
    return f"{public_id}-0-{suffix}" if kind == "completion" else f"{public_id}-{suffix}"


DONE = b"data: [DONE]\n\n"


class ResponseWriter:
    """Renders one request's responses: whole bodies or SSE chunks.

    As vLLM 0.32 streams: chat opens with a role chunk; the finish_reason rides on the last
    token's chunk; `system_fingerprint` sits on that chunk, or on the usage chunk (choices [])
    when include_usage is set; no `usage` key on the other chunks.
    """

    def __init__(self, req: GenerationRequest, fingerprint: str) -> None:
        self.req = req
        self.fingerprint = fingerprint
        self.id = ("chatcmpl-" if req.kind == "chat" else "cmpl-") + uuid.uuid4().hex[:16]
        self.created = int(time.time())
        self._head = {
            "id": self.id,
            "object": self._object(stream=True),
            "created": self.created,
            "model": req.model,
        }
        opening = "data: " + compact_json(self._head)[:-1] + ',"choices":[{"index":0,'
        if req.kind == "chat":
            self._token_prefix = opening + '"delta":{"content":'
            self._token_suffix = '},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
        else:
            self._token_prefix = opening + '"text":'
            self._token_suffix = (
                ',"logprobs":null,"finish_reason":null,"stop_reason":null,'
                '"prompt_token_ids":null,"token_ids":null}]}\n\n'
            )

    def _object(self, stream: bool) -> str:
        if self.req.kind == "chat":
            return "chat.completion.chunk" if stream else "chat.completion"
        return "text_completion"

    def role_chunk(self) -> bytes:
        """Chat streams open with the assistant role (vLLM sends it with the first token)."""
        return _sse(
            {
                **self._head,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                "prompt_token_ids": None,
                "prompt_text": None,
            }
        )

    def token_chunk(self, text: str) -> bytes:
        return (
            self._token_prefix + json.dumps(text, ensure_ascii=False) + self._token_suffix
        ).encode()

    def last_chunk(self, text: str, finish_reason: str, kv_params: dict | None = None) -> bytes:
        """The last token's chunk, carrying the finish_reason."""
        if self.req.kind == "chat":
            choice = {
                "index": 0,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "token_ids": None,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "prompt_token_ids": None,
                "token_ids": None,
            }
        body: dict[str, Any] = {**self._head, "choices": [choice]}
        if not self.req.include_usage:
            body["system_fingerprint"] = self.fingerprint
        if kv_params is not None:
            body["kv_transfer_params"] = kv_params
        return _sse(body)

    def usage_chunk(
        self, prompt_tokens: int, completion_tokens: int, extra: dict | None = None
    ) -> bytes:
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }
        body = {**self._head, "choices": [], "usage": usage, "system_fingerprint": self.fingerprint}
        return _sse({**body, **extra} if extra else body)

    def error_chunk(self, message: str, status: int = 500) -> bytes:
        return _sse(
            {
                "error": {
                    "message": message,
                    "type": "InternalServerError",
                    "param": None,
                    "code": status,
                }
            }
        )

    def body(
        self,
        text: str,
        finish_reason: str,
        prompt_tokens: int,
        completion_tokens: int,
        kv_params: dict | None,
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0}
        if self.req.kind == "chat":
            choice["message"] = {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "reasoning": None,
            }
        else:
            choice["text"] = text
        choice.update(logprobs=None, finish_reason=finish_reason, stop_reason=None, token_ids=None)
        if self.req.kind == "completion":
            choice.update(prompt_logprobs=None, prompt_token_ids=None)
        choice["routed_experts"] = None
        body = {
            "id": self.id,
            "object": self._object(False),
            "created": self.created,
            "model": self.req.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": self.fingerprint,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "completion_tokens": completion_tokens,
                "prompt_tokens_details": None,
                "completion_tokens_details": None,
            },
        }
        if self.req.kind == "chat":
            body.update(prompt_logprobs=None, prompt_token_ids=None, prompt_text=None)
        body.update(kv_transfer_params=kv_params, ec_transfer_params=None, metrics=None)
        return body


def compact_json(obj: Any) -> str:
    """JSON as vLLM sends it (Starlette's JSONResponse, pydantic): no spaces, raw UTF-8."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _sse(body: dict[str, Any]) -> bytes:
    return b"data: " + compact_json(body).encode() + b"\n\n"


def models_body(served_model: str, root: str, max_model_len: int, created: int) -> dict[str, Any]:
    permission = {
        "id": "modelperm-" + uuid.uuid4().hex[:16],
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    return {
        "object": "list",
        "data": [
            {
                "id": served_model,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": root,
                "parent": None,
                "max_model_len": max_model_len,
                "permission": [permission],
            }
        ],
    }
