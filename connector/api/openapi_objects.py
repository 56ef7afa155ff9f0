"""The OpenAPI objects both halves of the proxy's document are built from (connector/api/openapi.py
and connector/api/openapi_admin.py): a JSON response, a JSON request body, and an OpenAI-style error
response with the `Error` schema it refers to."""

from __future__ import annotations

from typing import Any

JSON = "application/json"
ERROR_REF = {"$ref": "#/components/schemas/Error"}

ERROR_SCHEMA: dict[str, Any] = {
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
}


def error_response(description: str, retry_after: bool = False) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {JSON: {"schema": ERROR_REF}},
    }
    if retry_after:
        response["headers"] = {
            "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}
        }
    return response


def json_response(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {JSON: {"schema": schema}}}
