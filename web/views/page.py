"""What every HTML page route shares: the signed-in actor (or a trip to /login), the context
each template gets; a page says no by raising (web/errors.py renders it)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status

from state.store import Current
from web import htmx
from web.deps import StoreDep, current_actor
from web.errors import Forbidden, Unauthorized
from web.security.auth import Actor

STATIC_FILES = htmx.STATIC_FILES


def page_actor(request: Request) -> Actor:
    """The signed-in actor; a browser without a valid cookie goes to the login page."""
    try:
        actor = current_actor(request)
    except Unauthorized:
        if htmx.is_htmx(request):
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED, headers=htmx.redirect("/login")
            ) from None
        raise HTTPException(status.HTTP_303_SEE_OTHER, headers={"Location": "/login"}) from None
    request.state.actor = actor  # for an error page this request may end with (web/errors.py)
    return actor


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


def deployment_or_404(store: StoreDep, name: str) -> Current:
    """NotFound or Unreadable otherwise: web/errors.py answers a page or a fragment."""
    return store.get(name)
