"""The proxy's public surface as an OpenAPI 3.1 document, written by hand and served at
`/openapi.json`: the OpenAI routes it serves (checked just enough to route, the rest is the
engine's business), `/health`, `/metrics`, and the admin API behind its own bearer token (its
paths and schemas in connector/api/openapi_admin.py).

Statuses are the ones the proxy answers; an engine's own refusal of a request (400, 404, 413,
422) reaches the client with the engine's status and message. Errors are OpenAI-style
(connector/errors.py).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from connector.api.openapi_admin import ADMIN_SCHEMAS, admin_paths, group_list
from connector.api.openapi_objects import (
    ERROR_SCHEMA,
    JSON,
    error_response,
    json_body,
    json_response,
)

VERSION = "1"

# One server-sent event: the engine's chunk (JSON) or [DONE] in `data`.
_SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
}

_GENERATION_ERRORS = {
    "400": error_response(
        "The body cannot be served: not JSON, or a field the proxy or the engine "
        "refuses (named in `param`)."
    ),
    "404": error_response("The engine does not serve this model."),
    "413": error_response("The body is larger than the proxy's --max-body-bytes."),
    "422": error_response("The engine refused a field."),
    "502": error_response(
        "A leg failed or timed out: names the leg (prefill, decode) and the instance."
    ),
    "503": error_response(
        "No instance can serve now, or dispatch is paused and the hold queue is "
        "full or its deadline passed.",
        retry_after=True,
    ),
}


def _generation(summary: str, body: str) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "tags": ["inference"],
            "requestBody": json_body({"$ref": f"#/components/schemas/{body}"}),
            "responses": {
                "200": {
                    "description": "The engine's answer; with `stream: true`, its server-sent "
                    "events passed through as they come (an error after the "
                    "first byte travels as a last `data:` event).",
                    "content": {
                        JSON: {"schema": {"type": "object"}},
                        "text/event-stream": {"schema": _SSE_EVENT},
                    },
                },
                **_GENERATION_ERRORS,
            },
        }
    }


INFERENCE_SCHEMAS: dict[str, Any] = {
    "CompletionRequest": {
        "type": "object",
        "required": ["model", "prompt"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "prompt": {
                "anyOf": [
                    {"type": "string", "minLength": 1},
                    {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
                ]
            },
            "max_tokens": {"type": ["integer", "null"], "minimum": 1},
            "stream": {"type": "boolean"},
            "stream_options": {
                "type": "object",
                "properties": {"include_usage": {"type": "boolean"}},
            },
        },
        "additionalProperties": True,  # the rest is for the engine to judge
    },
    "ChatRequest": {
        "type": "object",
        "required": ["model", "messages"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "messages": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["role", "content"],
                    "properties": {
                        "role": {"type": "string", "enum": ["system", "user", "assistant"]},
                        "content": {"type": "string"},
                    },
                },
            },
            "max_tokens": {"type": ["integer", "null"], "minimum": 1},
            "max_completion_tokens": {"type": ["integer", "null"], "minimum": 1},
            "stream": {"type": "boolean"},
            "stream_options": {
                "type": "object",
                "properties": {"include_usage": {"type": "boolean"}},
            },
        },
        "additionalProperties": True,
    },
}

SCHEMAS: dict[str, Any] = {"Error": ERROR_SCHEMA, **INFERENCE_SCHEMAS, **ADMIN_SCHEMAS}


def document() -> dict[str, Any]:
    groups = group_list()
    paths: dict[str, Any] = {
        "/v1/completions": _generation(
            "A completion, split into a prefill and a decode leg (or whole, in a colocated group).",
            "CompletionRequest",
        ),
        "/v1/chat/completions": _generation("A chat completion, the same way.", "ChatRequest"),
        "/v1/models": {
            "get": {
                "summary": "The models of the first available instance.",
                "tags": ["inference"],
                "responses": {
                    "200": json_response(
                        "As the engine lists them.",
                        {
                            "type": "object",
                            "required": ["data"],
                            "properties": {
                                "object": {"type": "string"},
                                "data": {"type": "array", "items": {"type": "object"}},
                            },
                        },
                    ),
                    "502": _GENERATION_ERRORS["502"],
                    "503": _GENERATION_ERRORS["503"],
                },
            }
        },
        "/health": {
            "get": {
                "summary": "The proxy is up; whether a request could be routed now.",
                "tags": ["operations"],
                "responses": {
                    "200": json_response(
                        "Always, while the proxy runs.",
                        {
                            "type": "object",
                            "required": ["status", "routable", "groups"],
                            "properties": {
                                "status": {"const": "ok"},
                                "routable": {"type": "boolean"},
                                "groups": groups,
                            },
                        },
                    )
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus text: per-request TTFT, ITL, SLO attainment, outcomes.",
                "tags": ["operations"],
                "responses": {
                    "200": {
                        "description": "Prometheus exposition format.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document.",
                "tags": ["operations"],
                "responses": {"200": json_response("OpenAPI 3.1.", {"type": "object"})},
            }
        },
        **admin_paths(),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "pdctl proxy",
            "version": VERSION,
            "description": "The prefill/decode proxy: OpenAI routes, health, metrics, "
            "and the admin API (its own bearer token, PDCTL_ADMIN_TOKEN).",
        },
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"adminBearer": {"type": "http", "scheme": "bearer"}},
        },
    }


async def serve(request: web.Request) -> web.Response:
    return web.json_response(document())
