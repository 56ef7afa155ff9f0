"""The SQLite repository: deployments with their revisions, allocated ports and events.

Every change to a deployment writes a new revision and an event in one transaction. Writes
are serialized by a lock, so that checking other deployments' ports and claiming new ones
cannot interleave between two requests of this server. Each event, once committed, is
handed to `publish` (the live hub): one `pdctl serve` per database (web/database/lock.py) means
every write passes here, so nobody polls the table.

The store knows no spec: it is given the rules (`SpecRules`, controller/launch/stored_spec.py and
services/admission.py) that read, admit and show one. A stored revision is read back through
today's rules: one they refuse (NaN or Infinity written before they were refused, a field
since removed) is `Unreadable`, a 409 naming the field that says to replace it, never a 500;
it can still be replaced, deleted and listed.

While a revision is in progress (state/changes.py), or a rollout holds the deployment
(state/rollout_store.py), any other change is a 409 naming it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from state import rollout_store, rows
from state.changes import Changes, RevisionState, supersede
from state.errors import Conflict, StaleRevision, Unreadable
from state.models import Deployment, Event, Revision, utcnow
from state.rollout_store import Rollouts


class Unfit(ValueError):
    """A stored spec or its ports that today's rules refuse, at `loc`."""

    def __init__(self, loc: tuple, why: str) -> None:
        super().__init__(why)
        self.loc, self.why = tuple(loc), why


class SpecRules(Protocol):
    """What the store asks of the spec's owner (the controller, and the web for admission)."""

    def load(self, spec: dict, ports: dict) -> tuple[Any, Any]:
        """The typed spec and ports of a stored revision, or Unfit."""
        ...

    def admit(self, spec: Any, others: Mapping[int, str], previous: tuple | None) -> Any:
        """The ports `spec` gets (others: port -> the deployment claiming it), or an error."""
        ...

    def claimed(self, spec: Mapping, ports: Mapping) -> set[int]: ...
    def dump(self, spec: Any) -> dict: ...
    def dump_ports(self, ports: Any) -> dict: ...
    def redact(self, spec: dict) -> dict: ...
    def unsafe(self, spec: Any) -> tuple[str, dict] | None: ...
    def renamed(self, name: str, spec: Any) -> Exception | None: ...
    def fresh(self, spec: Any, name: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class Current:
    """A deployment as it stands: its desired revision, typed, and that revision's state."""

    name: str
    revision: int
    created_at: datetime
    updated_at: datetime
    spec: Any  # controller.spec.deployment.DeploymentSpec
    ports: Any  # controller.launch.ports.AllocatedPorts
    actor: str
    reason: str | None
    state: str = RevisionState.APPLIED.value


class Store(Changes, Rollouts):
    def __init__(
        self,
        engine: sa.Engine,
        rules: SpecRules,
        publish: Callable[[Event], None] | None = None,
    ) -> None:
        self.engine, self.rules = engine, rules
        self.publish = publish
        self._write = threading.Lock()

    # -- deployments --------------------------------------------------------------------

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

    # -- events -------------------------------------------------------------------------

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

    # -- inside a write -----------------------------------------------------------------

    def _commit(self, s: Session, name: str, *events: Event) -> None:
        """Commit, then hand each event (loaded, so it outlives the session) to `publish`."""
        rows.commit(s, name)
        for event in events:
            s.refresh(event)
        if self.publish is not None:
            for event in events:
                self.publish(event)

    def _current(self, dep: Deployment, revision: Revision) -> Current:
        spec, ports = self._load(dep.name, revision)
        return Current(
            dep.name,
            dep.revision,
            dep.created_at,
            dep.updated_at,
            spec,
            ports,
            revision.actor,
            revision.reason,
            revision.state,
        )

    def _load(self, name: str, revision: Revision) -> tuple[Any, Any]:
        try:
            return self.rules.load(revision.spec, revision.ports)
        except Unfit as unfit:
            field = ".".join(str(p) for p in unfit.loc) or "spec"
            raise Unreadable(name, revision.number, field, unfit.why) from None

    def _new_revision(
        self,
        dep: Deployment,
        number: int,
        spec: Any,
        ports: Any,
        actor: str,
        reason: str | None,
        state: RevisionState = RevisionState.APPLIED,
    ) -> Revision:
        return Revision(
            deployment_id=dep.id,  # type: ignore[arg-type]  # a flushed or loaded row has its id
            number=number,
            spec=self.rules.dump(spec),
            ports=self.rules.dump_ports(ports),
            actor=actor,
            reason=reason,
            state=state.value,
        )

    def _admit(self, s: Session, spec: Any, previous: Revision | None) -> Any:
        old = None
        if previous is not None:
            try:  # an unreadable previous revision keeps no ports: they are allocated anew
                old = self.rules.load(previous.spec, previous.ports)
            except Unfit:
                old = None
        return self.rules.admit(spec, self._claims(s, exclude=spec.name), old)

    def _claims(self, s: Session, exclude: str) -> dict[int, str]:
        """Each port another deployment's current revision claims, to that deployment."""
        found = s.exec(
            select(Deployment.name, Revision.spec, Revision.ports)
            .join(
                Revision,
                sa.and_(
                    col(Revision.deployment_id) == col(Deployment.id),
                    col(Revision.number) == col(Deployment.revision),
                ),
            )
            .where(Deployment.name != exclude)
        )
        claims: dict[int, str] = {}
        for name, spec, ports in found:
            for port in self.rules.claimed(spec, ports):
                claims[port] = name
        return claims

    def _said(self, spec: Any) -> str:
        # An override of the engine allowlists is said in every event of a revision carrying it.
        unsafe = self.rules.unsafe(spec)
        return f"; engine allowlists overridden for {unsafe[0]}" if unsafe else ""

    def _unsafe_detail(self, spec: Any) -> dict:
        unsafe = self.rules.unsafe(spec)
        return {"unsafe_allow": unsafe[1]} if unsafe else {}
