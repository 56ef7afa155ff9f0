"""GET /api/deployments/{name}/autopilot: the P:D ratio autopilot's mode (on, dry-run, off),
its settings, its last decision with the numbers that drove it, its last move
(services/autopilot_loop.py)."""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from services.autopilot_loop import status_line
from web.deps import StoreDep
from web.views.page import PageActor

router = APIRouter(prefix="/deployments/{name}", tags=["lifecycle"])
page_router = APIRouter(tags=["pages"], include_in_schema=False)


@router.get("/autopilot")
def autopilot(name: str, request: Request, store: StoreDep) -> dict[str, Any]:
    """What the autopilot does here; `mode` off when the spec has no enabled autopilot."""
    return _status(request, store, name)


@page_router.get("/deployments/{name}/autopilot", response_class=HTMLResponse)
def autopilot_fragment(name: str, request: Request, store: StoreDep, actor: PageActor):
    """The deployment page's one line: "autopilot: on, last move ..." (polled)."""
    return HTMLResponse(escape(status_line(_status(request, store, name))))


def _status(request: Request, store: Any, name: str) -> dict[str, Any]:
    spec = store.get(name).spec  # NotFound: 404
    loop = getattr(request.app.state, "autopilot", None)
    if loop is None:
        mode = "off" if spec.autopilot is None else "not running (no controller here)"
        return {"mode": mode, "settings": None, "last_decision": None, "last_move": None}
    return loop.status(name, spec)
