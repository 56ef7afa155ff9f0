"""What every HTML page route shares: the signed-in actor (or a trip to /login), the context
each template gets, and how a page says no."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.responses import HTMLResponse

from state.store import Current
from web import htmx
from web.auth import Actor
from web.deps import StoreDep, current_actor
from web.errors import Forbidden, NotFound, PdctlError, Unauthorized, Unreadable

STATIC_FILES = {
    "htmx": f"htmx-{htmx.HTMX_VERSION}.min.js",
    "htmx_ws": f"htmx-ext-ws-{htmx.HTMX_WS_VERSION}.min.js",
    "uplot": f"uPlot-{htmx.UPLOT_VERSION}.iife.min.js",
    "uplot_css": f"uPlot-{htmx.UPLOT_VERSION}.min.css",
}


def page_actor(request: Request) -> Actor:
    """The signed-in actor; a browser without a valid cookie goes to the login page."""
    try:
        return current_actor(request)
    except Unauthorized:
        if htmx.is_htmx(request):
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED, headers=htmx.redirect("/login")
            ) from None
        raise HTTPException(status.HTTP_303_SEE_OTHER, headers={"Location": "/login"}) from None


PageActor = Annotated[Actor, Depends(page_actor)]


def page_context(request: Request, actor: Actor, **extra: Any) -> dict[str, Any]:
    return {
        "static": STATIC_FILES,
        "actor": actor,
        "auth": request.app.state.tokens.enabled,
        **extra,
    }


def require_operator(actor: Actor) -> None:
    """Raised inside a handler, not as a dependency, so a viewer's refusal is a message in the
    form or panel rather than an error page."""
    if not actor.may_change:
        raise Forbidden(f"{actor.label} may only read; changes need an operator token")


class PageError(HTTPException):
    def __init__(self, error: PdctlError) -> None:
        super().__init__(error.status, error.message)


def deployment_or_404(store: StoreDep, name: str) -> Current:
    try:
        return store.get(name)
    except (NotFound, Unreadable) as exc:
        raise PageError(exc) from None


def error_page(request: Request, actor: Actor, error: PdctlError) -> HTMLResponse:
    return htmx.page(
        request,
        "error.html",
        page_context(request, actor, title=error.title, message=error.message),
        error.status,
    )
