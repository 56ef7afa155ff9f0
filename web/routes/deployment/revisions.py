"""/api/deployments/{name}/revisions and /diff: the history of a deployment."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from controller import redact_spec
from web.deps import INT64_MAX, RevisionNumber, StoreDep, Viewer
from web.diff import diff
from web.schemas import ChangeOut, DiffOut, RevisionOut, RevisionSummary

router = APIRouter(prefix="/deployments/{name}", tags=["revisions"])


@router.get("/revisions")
def list_revisions(name: str, store: StoreDep) -> list[RevisionSummary]:
    """Newest first."""
    return [RevisionSummary.of(r) for r in store.revisions(name)]


@router.get("/revisions/{number}")
def get_revision(name: str, number: RevisionNumber, store: StoreDep, actor: Viewer) -> RevisionOut:
    """Secret-looking env values and args are masked for viewers."""
    return RevisionOut.of(store.revision(name, number), actor.may_change)


@router.get("/diff")
def diff_revisions(
    name: str,
    store: StoreDep,
    actor: Viewer,
    from_: Annotated[int, Query(alias="from", ge=1, le=INT64_MAX)],
    to: Annotated[int, Query(ge=1, le=INT64_MAX)],
) -> DiffOut:
    """What changed from revision `from` to revision `to`, field by field."""
    old, new = store.revision(name, from_), store.revision(name, to)
    shown = (lambda spec: spec) if actor.may_change else redact_spec
    return DiffOut(
        from_=from_,
        to=to,
        changes=[ChangeOut.of(c) for c in diff(shown(old.spec), shown(new.spec))],
        port_changes=[ChangeOut.of(c) for c in diff(old.ports, new.ports)],
    )
