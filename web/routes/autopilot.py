"""GET /api/deployments/{name}/autopilot: the P:D ratio autopilot's mode (on, dry-run, off),
its settings, its last decision with the numbers that drove it, its last move
(web/autopilot_loop.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from web.deps import StoreDep

router = APIRouter(prefix="/deployments/{name}", tags=["lifecycle"])


@router.get("/autopilot")
def autopilot(name: str, request: Request, store: StoreDep) -> dict[str, Any]:
    """What the autopilot does here; `mode` off when the spec has no enabled autopilot."""
    spec = store.get(name).spec  # NotFound: 404
    loop = getattr(request.app.state, "autopilot", None)
    if loop is None:
        mode = "off" if spec.autopilot is None else "not running (no controller here)"
        return {"mode": mode, "settings": None, "last_decision": None, "last_move": None}
    return loop.status(name, spec)
