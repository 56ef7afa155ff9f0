"""The proxy's OpenAPI document: served at /openapi.json, it lists exactly the routes the app
serves, every admin operation needs the bearer token, and every reference resolves."""

from __future__ import annotations

import json
import re

import aiohttp
import schemathesis

from connector.api.openapi import document
from connector.server import create_app
from tests.connector.fakes import run, running, settings_for


def served_routes() -> set[str]:
    """`METHOD /path` of every route of the app and of its admin sub-app (whose paths aiohttp
    has already prefixed with /admin)."""
    app = create_app(settings_for())
    admin = next(r for r in app.router.resources() if r.get_info().get("prefix") == "/admin")
    found: set[str] = set()
    for router in (app.router, admin._app.router):
        for route in router.routes():
            info = route.resource.get_info() if route.resource is not None else {}
            path = info.get("path") or info.get("formatter")
            if path is not None and route.method != "HEAD":
                found.add(f"{route.method} {path}")
    return found


def documented() -> set[str]:
    return {
        f"{method.upper()} {path}" for path, ops in document()["paths"].items() for method in ops
    }


def test_the_document_lists_exactly_the_routes_the_proxy_serves():
    assert documented() == served_routes()


def test_admin_operations_need_the_bearer_token_and_say_401():
    doc = document()
    assert doc["components"]["securitySchemes"]["adminBearer"] == {
        "type": "http",
        "scheme": "bearer",
    }
    for path, ops in doc["paths"].items():
        for op in ops.values():
            secured = op.get("security") == [{"adminBearer": []}]
            assert secured is path.startswith("/admin"), path
            assert ("401" in op["responses"]) is secured, path


def test_every_reference_resolves_and_schemathesis_loads_it():
    doc = document()
    text = json.dumps(doc)
    for ref in re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', text):
        assert ref in doc["components"]["schemas"], ref
    labels = {r.ok().label for r in schemathesis.openapi.from_dict(doc).get_all_operations()}
    assert labels == documented()


def test_generation_routes_document_the_statuses_the_proxy_answers():
    for path in ("/v1/completions", "/v1/chat/completions"):
        responses = document()["paths"][path]["post"]["responses"]
        assert set(responses) == {"200", "400", "404", "413", "422", "502", "503"}
        assert "Retry-After" in responses["503"]["headers"]
        assert set(responses["200"]["content"]) == {"application/json", "text/event-stream"}


def test_it_is_served_at_openapi_json_without_the_admin_token():
    async def body():
        async with (
            running(settings_for(admin_token="t0k")) as (base, _),
            aiohttp.ClientSession() as s,
            s.get(base + "/openapi.json") as r,
        ):
            assert r.status == 200 and r.content_type == "application/json"
            assert await r.json() == document()

    run(body())
