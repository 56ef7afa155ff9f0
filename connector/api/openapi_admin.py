"""The admin API's half of the proxy's OpenAPI document (connector/api/openapi.py assembles it):
the `/admin` paths, each behind the admin bearer token, and the schemas only they use."""

from __future__ import annotations

from typing import Any

from connector.api.openapi_objects import error_response, json_body, json_response

_ADMIN_ERRORS = {"401": error_response("No admin token, or a wrong one.")}

ADMIN_ERROR_TEXT = {
    "400": error_response(
        "The body is not a JSON object, or a field is missing or wrong (`param`)."
    ),
    "404": error_response("No such instance or group."),
}

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


def group_list() -> dict[str, Any]:
    """The groups, as /health and the admin API list them."""
    return {"type": "array", "items": _GROUP}


ADMIN_SCHEMAS: dict[str, Any] = {
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
        operation["requestBody"] = json_body(body)
    if parameters:
        operation["parameters"] = parameters
    return {method: operation}


def admin_paths() -> dict[str, Any]:
    """The `/admin` paths, in the order the document lists them."""
    groups = group_list()
    return {
        "/admin/instances": {
            **_admin(
                "get",
                "Instances with group, health and load, and the groups.",
                json_response(
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
                json_response("The instance.", _INSTANCE),
                ok_status="201",
                body={"$ref": "#/components/schemas/NewInstance"},
                errors=("400",),
            ),
        },
        "/admin/instances/remove": _admin(
            "post",
            "Remove an instance.",
            json_response("The removed instance.", _INSTANCE),
            body=_URL_BODY,
            errors=("400", "404"),
        ),
        "/admin/instances/drain": _admin(
            "post",
            "Send an instance no new requests.",
            json_response("The instance.", _INSTANCE),
            body=_URL_BODY,
            errors=("400", "404"),
        ),
        "/admin/instances/undrain": _admin(
            "post",
            "Send an instance requests again.",
            json_response("The instance.", _INSTANCE),
            body=_URL_BODY,
            errors=("400", "404"),
        ),
        "/admin/instances/whole": _admin(
            "post",
            "Let a prefill or decode instance also serve whole requests (or stop).",
            json_response("The instance.", _INSTANCE),
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
            json_response(
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
            json_response("The group.", _GROUP),
            errors=("404",),
            parameters=_GROUP_PARAM,
        ),
        "/admin/groups/{group}/resume": _admin(
            "post",
            "Release the held requests and dispatch again.",
            json_response("The group.", _GROUP),
            errors=("404",),
            parameters=_GROUP_PARAM,
        ),
        "/admin/requests": _admin(
            "get",
            "The most recent requests, newest last.",
            json_response(
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
            json_response(
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
            json_response(
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
