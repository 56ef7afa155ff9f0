"""Rows of the store, read and written inside its sessions: a deployment, a revision, the
next revision number, a commit that turns a lost race into a Conflict."""

from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from domain.names import did_you_mean
from state.errors import Conflict, NotFound
from state.models import Deployment, Revision


def deployment(s: Session, name: str) -> Deployment:
    row = s.exec(select(Deployment).where(Deployment.name == name)).first()
    if row is None:
        known = s.exec(select(Deployment.name)).all()
        raise NotFound(f"no deployment named {name!r}{did_you_mean(name, known)}")
    return row


def revision(s: Session, dep: Deployment, number: int) -> Revision:
    row = s.exec(
        select(Revision).where(Revision.deployment_id == dep.id, Revision.number == number)
    ).first()
    if row is None:
        raise NotFound(
            f"deployment {dep.name!r} has no revision {number} (current: {dep.revision})"
        )
    return row


def next_number(s: Session, dep: Deployment) -> int:
    """After the highest stored: a failed change leaves its revision above the desired one."""
    highest = s.exec(
        select(func.max(Revision.number)).where(Revision.deployment_id == dep.id)
    ).one()
    return max(highest or 0, dep.revision) + 1


def in_state(s: Session, dep: Deployment, state: str) -> list[Revision]:
    """The deployment's revisions in `state`, newest first."""
    return list(
        s.exec(
            select(Revision)
            .where(Revision.deployment_id == dep.id, Revision.state == state)
            .order_by(col(Revision.number).desc())
        )
    )


def commit(s: Session, name: str) -> None:
    try:
        s.commit()
    except sa.exc.IntegrityError:  # another writer on the same file won the race
        s.rollback()
        raise Conflict(f"deployment {name!r} changed concurrently; try again") from None


def why(reason: str | None) -> str:
    return f": {reason}" if reason else ""
