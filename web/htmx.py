"""The htmx protocol in one place (pinned to htmx 2.0.x): is this an htmx request, which
named block of a page template answers it, and the response headers htmx acts on.

Fragments before files: a page template declares `{% block name %}` regions; a full load
renders the whole page, an htmx request renders one block (plus out-of-band blocks for the
other regions it changed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import HTMLResponse

HTMX_VERSION = "2.0.11"
HTMX_WS_VERSION = "2.0.4"
UPLOT_VERSION = "1.6.9"
STATIC_FILES = {  # what base.html loads, by the pinned versions above
    "htmx": f"htmx-{HTMX_VERSION}.min.js",
    "htmx_ws": f"htmx-ext-ws-{HTMX_WS_VERSION}.min.js",
    "uplot": f"uPlot-{UPLOT_VERSION}.iife.min.js",
    "uplot_css": f"uPlot-{UPLOT_VERSION}.min.css",
}


def is_htmx(request: Request) -> bool:
    """True when htmx made the request (and not a history restore, which wants a page)."""
    return (
        request.headers.get("hx-request") == "true"
        and request.headers.get("hx-history-restore-request") != "true"
    )


def render_blocks(
    templates: Jinja2Templates, name: str, blocks: Iterable[str], context: Mapping[str, Any]
) -> str:
    """The named blocks of template `name`, rendered with `context`, one after the other."""
    template = templates.env.get_template(name)
    ctx = template.new_context(dict(context))
    return "".join("".join(template.blocks[block](ctx)) for block in blocks)


def fragment(
    request: Request,
    name: str,
    blocks: str | Iterable[str],
    context: Mapping[str, Any],
    status_code: int = 200,
    trigger: str | Mapping[str, Any] | None = None,
) -> HTMLResponse:
    """One or more blocks of a page template as an htmx response."""
    blocks = (blocks,) if isinstance(blocks, str) else tuple(blocks)
    html = render_blocks(request.app.state.templates, name, blocks, {"request": request, **context})
    response = HTMLResponse(html, status_code=status_code)
    vary(response)
    if trigger is not None:
        set_trigger(response, trigger)
    return response


def page(
    request: Request, name: str, context: Mapping[str, Any], status_code: int = 200
) -> HTMLResponse:
    """The whole page (a first load, a reload, a link followed without htmx)."""
    response = request.app.state.templates.TemplateResponse(
        request, name, dict(context), status_code=status_code
    )
    vary(response)
    return response


def vary(response: HTMLResponse) -> None:
    """The same URL answers a page or a fragment: caches must key on HX-Request."""
    response.headers["Vary"] = "HX-Request"


def set_trigger(response: HTMLResponse, events: str | Mapping[str, Any]) -> None:
    """Client-side events htmx fires once the response is in (`HX-Trigger`)."""
    response.headers["HX-Trigger"] = events if isinstance(events, str) else json.dumps(events)


def redirect(url: str) -> dict[str, str]:
    """Headers that make htmx load `url` as a full page (whatever the status)."""
    return {"HX-Redirect": url}


def retarget(response: HTMLResponse, selector: str, swap: str | None = None) -> None:
    """Swap this response somewhere other than the element that asked."""
    response.headers["HX-Retarget"] = selector
    if swap:
        response.headers["HX-Reswap"] = swap
