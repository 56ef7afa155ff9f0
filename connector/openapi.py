"""The proxy's public surface as an OpenAPI 3.1 document, written by hand and served at
`/openapi.json`: the OpenAI routes it serves (checked just enough to route, the rest is the
engine's business), `/health`, `/metrics`, and the admin API behind its own bearer token.

Statuses are the ones the proxy answers; an engine's own refusal of a request (400, 404, 413,
422) reaches the client with the engine's status and message. Errors are OpenAI-style
(connector/errors.py).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

VERSION = "1"

_JSON = "application/json"
_ERROR = {"$ref": "#/components/schemas/Error"}


def _error(description: str, retry_after: bool = False) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": {_JSON: {"schema": _ERROR}}}
    if retry_after:
        response["headers"] = {
            "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}
        }
    return response


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": schema}}}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {_JSON: {"schema": schema}}}


# One registration the controller expects (PUT /admin/registry/expected).
_EXPECTED = {
    "type": "object",
    "required": ["url", "role", "modes"],
    "properties": {
        "url": {"type": "string"},
        "role": {"enum": ["prefill", "decode"]},
        "modes": {"type": "array", "items": {"enum": ["read", "write"]}},
        "zmq_address": {"type": ["string", "null"]},
        "tp_size": {"type": "integer", "minimum": 1},
        "dp_size": {"type": "integer", "minimum": 1},
    },
}

# One server-sent event: the engine's chunk (JSON) or [DONE] in `data`.
_SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
}

_GENERATION_ERRORS = {
    "400": _error(
        "The body cannot be served: not JSON, or a field the proxy or the engine "
        "refuses (named in `param`)."
    ),
    "404": _error("The engine does not serve this model."),
    "413": _error("The body is larger than the proxy's --max-body-bytes."),
    "422": _error("The engine refused a field."),
    "502": _error("A leg failed or timed out: names the leg (prefill, decode) and the instance."),
    "503": _error(
        "No instance can serve now, or dispatch is paused and the hold queue is "
        "full or its deadline passed.",
        retry_after=True,
    ),
}

_ADMIN_ERRORS = {"401": _error("No admin token, or a wrong one.")}


def _generation(summary: str, body: str) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "tags": ["inference"],
            "requestBody": _body({"$ref": f"#/components/schemas/{body}"}),
            "responses": {
                "200": {
                    "description": "The engine's answer; with `stream: true`, its server-sent "
                    "events passed through as they come (an error after the "
                    "first byte travels as a last `data:` event).",
                    "content": {
                        _JSON: {"schema": {"type": "object"}},
                        "text/event-stream": {"schema": _SSE_EVENT},
                    },
                },
                **_GENERATION_ERRORS,
            },
        }
    }


def _admin(
    method: str,
    summary: str,
    ok: dict[str, Any],
    body: dict[str, Any] | None = None,
    errors: tuple[str, ...] = (),
    parameters: list | None = None,
    ok_status: str = "200",
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "tags": ["admin"],
        "security": [{"adminBearer": []}],
        "responses": {
            ok_status: ok,
            **_ADMIN_ERRORS,
            **{code: ADMIN_ERROR_TEXT[code] for code in errors},
        },
    }
    if body is not None:
        operation["requestBody"] = _body(body)
    if parameters:
        operation["parameters"] = parameters
    return {method: operation}


ADMIN_ERROR_TEXT = {
    "400": _error("The body is not a JSON object, or a field is missing or wrong (`param`)."),
    "404": _error("No such instance or group."),
}

_URL_BODY = {"type": "object", "required": ["url"], "properties": {"url": {"type": "string"}}}
_INSTANCE = {"$ref": "#/components/schemas/Instance"}
_GROUP = {"$ref": "#/components/schemas/Group"}
_GROUP_PARAM = [
    {
        "name": "group",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "enum": ["read", "write", "colocated"]},
    }
]


SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "code": {"type": "integer"},
                    "param": {"type": ["string", "null"]},
                    "leg": {"type": "string"},
                    "instance": {"type": "string"},
                },
            }
        },
    },
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
    "Instance": {
        "type": "object",
        "required": ["url", "role", "group", "healthy", "draining", "whole", "source"],
        "properties": {
            "url": {"type": "string"},
            "role": {"enum": ["prefill", "decode", "colocated"]},
            "group": {"enum": ["read", "write", "colocated"]},
            "zmq_address": {"type": ["string", "null"]},
            "dp_size": {"type": "integer"},
            "tp_size": {"type": "integer"},
            "source": {"enum": ["flag", "registry", "admin"]},
            "healthy": {"type": "boolean"},
            "draining": {"type": "boolean"},
            "whole": {"type": "boolean"},
            "outstanding_requests": {"type": "integer"},
            "outstanding_tokens": {"type": "integer"},
            "served": {"type": "integer"},
            "failed": {"type": "integer"},
            "last_error": {"type": ["string", "null"]},
            "failed_in_a_row": {"type": "integer", "minimum": 0},
            "ejected_for_s": {
                "type": "number",
                "minimum": 0,
                "description": "Seconds left of an outlier ejection.",
            },
            "ejections": {"type": "integer", "minimum": 0},
        },
    },
    "Group": {
        "type": "object",
        "required": ["mode", "paused", "instances"],
        "properties": {
            "mode": {"enum": ["read", "write", "colocated"]},
            "paused": {"type": "boolean"},
            "instances": {
                "type": "object",
                "additionalProperties": {"type": "integer", "minimum": 0},
            },
        },
    },
    "NewInstance": {
        "type": "object",
        "required": ["url", "role"],
        "properties": {
            "url": {"type": "string", "pattern": "^https?://"},
            # "both" is the older name of a colocated instance, still taken
            "role": {"enum": ["prefill", "decode", "colocated", "both"]},
            "group": {"enum": ["read", "write", "colocated"]},
            "zmq_address": {"type": ["string", "null"]},
            "dp_size": {"type": "integer", "minimum": 1},
            "tp_size": {"type": "integer", "minimum": 1},
        },
    },
}


def document() -> dict[str, Any]:
    groups = {"type": "array", "items": _GROUP}
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
                    "200": _json(
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
                    "200": _json(
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
                "responses": {"200": _json("OpenAPI 3.1.", {"type": "object"})},
            }
        },
        "/admin/instances": {
            **_admin(
                "get",
                "Instances with group, health and load, and the groups.",
                _json(
                    "Instances and groups.",
                    {
                        "type": "object",
                        "required": ["instances", "groups"],
                        "properties": {
                            "instances": {"type": "array", "items": _INSTANCE},
                            "groups": groups,
                        },
                    },
                ),
            ),
            **_admin(
                "post",
                "Add an instance, or update the one with this URL.",
                _json("The instance.", _INSTANCE),
                ok_status="201",
                body={"$ref": "#/components/schemas/NewInstance"},
                errors=("400",),
            ),
        },
        "/admin/instances/remove": _admin(
            "post",
            "Remove an instance.",
            _json("The removed instance.", _INSTANCE),
            body=_URL_BODY,
            errors=("400", "404"),
        ),
        "/admin/instances/drain": _admin(
            "post",
            "Send an instance no new requests.",
            _json("The instance.", _INSTANCE),
            body=_URL_BODY,
            errors=("400", "404"),
        ),
        "/admin/instances/undrain": _admin(
            "post",
            "Send an instance requests again.",
            _json("The instance.", _INSTANCE),
            body=_URL_BODY,
            errors=("400", "404"),
        ),
        "/admin/instances/whole": _admin(
            "post",
            "Let a prefill or decode instance also serve whole requests (or stop).",
            _json("The instance.", _INSTANCE),
            errors=("400", "404"),
            body={
                "type": "object",
                "required": ["url"],
                "properties": {"url": {"type": "string"}, "whole": {"type": "boolean"}},
            },
        ),
        "/admin/groups": _admin(
            "get",
            "Groups, paused or not, and the requests held.",
            _json(
                "Groups.",
                {
                    "type": "object",
                    "required": ["groups", "held_requests"],
                    "properties": {
                        "groups": groups,
                        "held_requests": {"type": "integer", "minimum": 0},
                    },
                },
            ),
        ),
        "/admin/groups/{group}/pause": _admin(
            "post",
            "Hold new requests for this group (bounded queue, deadline).",
            _json("The group.", _GROUP),
            errors=("404",),
            parameters=_GROUP_PARAM,
        ),
        "/admin/groups/{group}/resume": _admin(
            "post",
            "Release the held requests and dispatch again.",
            _json("The group.", _GROUP),
            errors=("404",),
            parameters=_GROUP_PARAM,
        ),
        "/admin/requests": _admin(
            "get",
            "The most recent requests, newest last.",
            _json(
                "Requests.",
                {
                    "type": "object",
                    "required": ["requests"],
                    "properties": {"requests": {"type": "array", "items": {"type": "object"}}},
                },
            ),
            errors=("400",),
            parameters=[
                {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer"}}
            ],
        ),
        "/admin/registry": _admin(
            "get",
            "The ZMQ registry: allowed senders, expected registrations, claims being probed "
            "and recent refusals, each naming the field at fault.",
            _json(
                "The registry.",
                {
                    "type": "object",
                    "required": ["allow", "expected", "registered", "pending", "refusals"],
                    "properties": {
                        "allow": {"type": "array", "items": {"type": "string"}},
                        "expected": {"type": ["array", "null"], "items": _EXPECTED},
                        "registered": {"type": "integer", "minimum": 0},
                        "pending": {"type": "array", "items": {"type": "string"}},
                        "refusals": {"type": "array", "items": {"type": "object"}},
                    },
                },
            ),
        ),
        "/admin/registry/expected": _admin(
            "put",
            "Replace the registrations to accept (null: believe any that /health confirms); "
            "registered instances they refuse are dropped.",
            _json(
                "The new expectations and the URLs dropped.",
                {
                    "type": "object",
                    "required": ["expected", "dropped"],
                    "properties": {
                        "expected": {"type": ["array", "null"], "items": _EXPECTED},
                        "dropped": {"type": "array", "items": {"type": "string"}},
                    },
                },
            ),
            body={
                "type": "object",
                "required": ["expected"],
                "properties": {"expected": {"type": ["array", "null"], "items": _EXPECTED}},
            },
            errors=("400",),
        ),
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
