"""The store's deployments and their revisions (state/store/): listed, read through today's
rules, created, updated, deleted and cloned. Every change writes a new revision and its event
in one transaction, under the write lock, and is refused while a change is in progress or a
rollout holds the deployment (the rule of state/changes.py, which this part builds on)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from state import rollout_store, rows
from state.changes import Changes, RevisionState, supersede
from state.errors import Conflict, StaleRevision, Unreadable
from state.models import Deployment, Event, Revision, utcnow
from state.store.base import Current, StoreBase


class Deployments(Changes, StoreBase):
    """Deployments and revisions, with the changes reality catches up with (Changes)."""

    def names(self) -> list[str]:
        with Session(self.engine) as s:
            return list(s.exec(select(Deployment.name).order_by(Deployment.name)))

    def deployments(self) -> list[Current]:
        """Every deployment whose current revision can be read (see `unreadable`)."""
        return [d for d in self._listing() if isinstance(d, Current)]

    def unreadable(self) -> list[Unreadable]:
        """Why each deployment whose current revision cannot be read is so."""
        return [d for d in self._listing() if isinstance(d, Unreadable)]

    def _listing(self) -> Iterator[Current | Unreadable]:
        with Session(self.engine) as s:
            found = list(
                s.exec(
                    select(Deployment, Revision)
                    .join(
                        Revision,
                        sa.and_(
                            col(Revision.deployment_id) == col(Deployment.id),
                            col(Revision.number) == col(Deployment.revision),
                        ),
                    )
                    .order_by(Deployment.name)
                )
            )
        for d, r in found:
            try:
                yield self._current(d, r)
            except Unreadable as exc:
                yield exc

    def get(self, name: str) -> Current:
        """The current revision, typed; Unreadable when today's rules refuse what is stored."""
        with Session(self.engine) as s:
            dep = rows.deployment(s, name)
            return self._current(dep, rows.revision(s, dep, dep.revision))

    def stored(self, name: str) -> Revision:
        """The current revision as stored, readable or not: what an edit starts from."""
        with Session(self.engine) as s:
            dep = rows.deployment(s, name)
            return rows.revision(s, dep, dep.revision)

    def create(
        self,
        spec: Any,
        actor: str,
        reason: str | None = None,
        *,
        kind: str = "deployment.created",
        detail: dict | None = None,
        dry_run: bool = False,
    ) -> Current:
        """`dry_run`: every check and the ports it would get, and nothing stored."""
        with self._write, Session(self.engine) as s:
            if s.exec(select(Deployment.id).where(Deployment.name == spec.name)).first():
                raise Conflict(f"deployment {spec.name!r} already exists")
            ports = self._admit(s, spec, None)
            now = utcnow()
            if dry_run:
                return Current(spec.name, 1, now, now, spec, ports, actor, reason)
            dep = Deployment(name=spec.name, revision=1, created_at=now, updated_at=now)
            s.add(dep)
            s.flush()
            # Pending until a start has every process of it running and ready; what pdctl
            # only watches (an attached deployment) runs already.
            watched = getattr(spec, "attached", False)
            first = RevisionState.APPLIED if watched else RevisionState.PENDING
            s.add(self._new_revision(dep, 1, spec, ports, actor, reason, first))
            verb = "cloned" if kind == "deployment.cloned" else "created"
            event = Event(
                actor=actor,
                kind=kind,
                deployment=spec.name,
                message=f"{spec.name} {verb} (revision 1)" + rows.why(reason) + self._said(spec),
                detail={"revision": 1, **(detail or {}), **self._unsafe_detail(spec)},
            )
            s.add(event)
            self._commit(s, spec.name, event)
        return self.get(spec.name)

    def update(
        self,
        name: str,
        spec: Any,
        actor: str,
        reason: str | None = None,
        *,
        based_on: int | None = None,
        dry_run: bool = False,
        pending: bool = False,
    ) -> Current:
        """`spec` as the next revision. `based_on`: the revision the change was made from;
        StaleRevision if another has been stored since, so that no edit silently undoes
        another (None: whatever is current). ChangeInProgress while one is. `dry_run`: the
        revision it would be, after every check, and nothing stored. `pending`: stored as
        desired but not rolled out (a running deployment's edit, which a rollout begins
        with begin_stored); otherwise applied at once."""
        refused = self.rules.renamed(name, spec)
        if refused is not None:
            raise refused
        with self._write, Session(self.engine) as s:
            dep = rows.deployment(s, name)
            self._refuse_while_in_progress(s, dep)
            if based_on is not None and based_on != dep.revision:
                raise StaleRevision(
                    f"deployment {name!r} is at revision {dep.revision}, but this edit "
                    f"was made from revision {based_on}: load revision {dep.revision} "
                    "and make the change again",
                    dep.revision,
                )
            previous = rows.revision(s, dep, dep.revision)
            if previous.spec == self.rules.dump(spec):
                return self._current(dep, previous)  # nothing changed: no new revision
            ports = self._admit(s, spec, previous)
            state = RevisionState.PENDING if pending else RevisionState.APPLIED
            if dry_run:
                number, now = rows.next_number(s, dep), utcnow()
                return Current(
                    name, number, dep.created_at, now, spec, ports, actor, reason, state.value
                )
            supersede(s, previous)
            dep.revision = rows.next_number(s, dep)
            dep.updated_at = utcnow()
            s.add(dep)
            s.add(self._new_revision(dep, dep.revision, spec, ports, actor, reason, state))
            event = Event(
                actor=actor,
                kind="deployment.updated",
                deployment=name,
                message=f"{name} updated to revision {dep.revision}"
                + (" (pending)" if pending else "")
                + rows.why(reason)
                + self._said(spec),
                detail={
                    "revision": dep.revision,
                    "previous": previous.number,
                    **({"state": state.value} if pending else {}),
                    **self._unsafe_detail(spec),
                },
            )
            s.add(event)
            self._commit(s, name, event)
        return self.get(name)

    def delete(self, name: str, actor: str, reason: str | None = None) -> None:
        with self._write, Session(self.engine) as s:
            dep = rows.deployment(s, name)
            self._refuse_while_in_progress(s, dep)
            last = rows.revision(s, dep, dep.revision)
            # Revisions go with the row (ON DELETE CASCADE), rollouts and start samples by
            # name; the event keeps the last revision.
            event = Event(
                actor=actor,
                kind="deployment.deleted",
                deployment=name,
                message=f"{name} deleted at revision {last.number}" + rows.why(reason),
                detail={
                    "revision": last.number,
                    "spec": self.rules.redact(last.spec),
                    "ports": last.ports,
                },
            )
            s.add(event)
            s.delete(dep)
            rollout_store.forget(s, name)
            self._commit(s, name, event)

    def clone(self, name: str, new_name: str, actor: str, reason: str | None = None) -> Current:
        source = self.get(name)
        return self.create(
            self.rules.fresh(source.spec, new_name),
            actor,
            reason,
            kind="deployment.cloned",
            detail={"source": name, "source_revision": source.revision},
        )

    # -- revisions ----------------------------------------------------------------------

    def revisions(self, name: str) -> list[Revision]:
        with Session(self.engine) as s:
            dep = rows.deployment(s, name)
            return list(
                s.exec(
                    select(Revision)
                    .where(Revision.deployment_id == dep.id)
                    .order_by(col(Revision.number).desc())
                )
            )

    def revision(self, name: str, number: int) -> Revision:
        with Session(self.engine) as s:
            return rows.revision(s, rows.deployment(s, name), number)
