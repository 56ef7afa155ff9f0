"""The store's events (state/store/): recorded, each published once committed, listed newest
first, and counted for /metrics."""

from __future__ import annotations

from sqlmodel import Session, col, func, select

from state.models import Deployment, Event, Revision
from state.store.base import StoreBase


class Events(StoreBase):
    """The event log: what every actor said happened."""

    def record(
        self,
        actor: str,
        kind: str,
        message: str,
        deployment: str | None = None,
        detail: dict | None = None,
    ) -> Event:
        with Session(self.engine) as s:
            event = Event(
                actor=actor, kind=kind, deployment=deployment, message=message, detail=detail or {}
            )
            s.add(event)
            self._commit(s, deployment or "", event)
            return event

    def events(
        self, deployment: str | None = None, kind: str | None = None, limit: int = 100
    ) -> list[Event]:
        query = select(Event).order_by(col(Event.id).desc()).limit(limit)
        if deployment is not None:
            query = query.where(Event.deployment == deployment)
        if kind is not None:
            query = query.where(Event.kind == kind)
        with Session(self.engine) as s:
            return list(s.exec(query))

    def counts(self) -> tuple[int, int, dict[str, int]]:
        """Deployments, revisions, and events by kind: what /metrics exports."""
        with Session(self.engine) as s:
            deployments = s.exec(select(func.count()).select_from(Deployment)).one()
            revisions = s.exec(select(func.count()).select_from(Revision)).one()
            kinds = s.exec(select(Event.kind, func.count()).group_by(Event.kind))
            return deployments, revisions, dict(kinds.all())
