"""/api/events: the audit trail, newest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from web.deps import StoreDep
from web.schemas import EventOut

router = APIRouter(prefix="/events", tags=["events"])


@router.get("")
def list_events(
    store: StoreDep,
    deployment: str | None = None,
    kind: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[EventOut]:
    return [EventOut.of(e) for e in store.events(deployment, kind, limit)]
