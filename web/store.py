"""The SQLite repository: deployments with their revisions, allocated ports and events.

Every change to a deployment writes a new revision and an event in one transaction. Writes
are serialized by a lock, so that checking other deployments' ports and claiming new ones
cannot interleave between two requests of this server.

A stored revision is read back through today's spec rules: one they refuse (NaN or Infinity
written before they were refused, a field since removed) is `Unreadable`, a 409 naming the
field that says to replace it, never a 500; it can still be replaced, deleted and listed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from pydantic import ValidationError
from sqlmodel import Session, col, func, select

from controller.deployment import DeploymentSpec, InstancePorts
from controller.ports import AllocatedPorts
from controller.redact import redact_spec
from controller.validation import Problem
from web.admission import Admission, admit, without_given_ports
from web.errors import Conflict, NotFound, SpecInvalid, StaleRevision, Unreadable
from web.finite import non_finite
from web.models import Deployment, Event, Revision, utcnow


@dataclass(frozen=True, slots=True)
class Current:
    """A deployment as it stands: its current revision, typed."""

    name: str
    revision: int
    created_at: datetime
    updated_at: datetime
    spec: DeploymentSpec
    ports: AllocatedPorts
    actor: str
    reason: str | None


def ports_to_json(ports: AllocatedPorts) -> dict:
    return {
        "proxy": ports.proxy,
        "registry": ports.registry,
        "instances": {k: v.model_dump() for k, v in ports.instances.items()},
    }


def ports_from_json(data: dict) -> AllocatedPorts:
    return AllocatedPorts(
        data["proxy"],
        data["registry"],
        {k: InstancePorts(**v) for k, v in data["instances"].items()},
    )


class Store:
    def __init__(self, engine: sa.Engine, admission: Admission) -> None:
        self.engine, self.admission = engine, admission
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
            rows = list(
                s.exec(
                    select(Deployment, Revision)
                    .join(
                        Revision,
                        sa.and_(
                            Revision.deployment_id == Deployment.id,
                            Revision.number == Deployment.revision,
                        ),
                    )
                    .order_by(Deployment.name)
                )
            )
        for d, r in rows:
            try:
                yield _current(d, r)
            except Unreadable as exc:
                yield exc

    def get(self, name: str) -> Current:
        """The current revision, typed; Unreadable when today's rules refuse what is stored."""
        with Session(self.engine) as s:
            deployment = _deployment(s, name)
            return _current(deployment, _revision(s, deployment, deployment.revision))

    def stored(self, name: str) -> Revision:
        """The current revision as stored, readable or not: what an edit starts from."""
        with Session(self.engine) as s:
            deployment = _deployment(s, name)
            return _revision(s, deployment, deployment.revision)

    def create(
        self,
        spec: DeploymentSpec,
        actor: str,
        reason: str | None = None,
        *,
        kind: str = "deployment.created",
        detail: dict | None = None,
    ) -> Current:
        with self._write, Session(self.engine) as s:
            if s.exec(select(Deployment.id).where(Deployment.name == spec.name)).first():
                raise Conflict(f"deployment {spec.name!r} already exists")
            ports = self._admit(s, spec, None)
            now = utcnow()
            deployment = Deployment(name=spec.name, revision=1, created_at=now, updated_at=now)
            s.add(deployment)
            s.flush()
            s.add(_new_revision(deployment, spec, ports, actor, reason))
            verb = "cloned" if kind == "deployment.cloned" else "created"
            s.add(
                Event(
                    actor=actor,
                    kind=kind,
                    deployment=spec.name,
                    message=f"{spec.name} {verb} (revision 1)" + _why(reason) + _unsafe(spec),
                    detail={"revision": 1, **(detail or {}), **_unsafe_detail(spec)},
                )
            )
            _commit(s, spec.name)
        return self.get(spec.name)

    def update(
        self,
        name: str,
        spec: DeploymentSpec,
        actor: str,
        reason: str | None = None,
        *,
        based_on: int | None = None,
    ) -> Current:
        """`spec` as the next revision. `based_on`: the revision the change was made from;
        StaleRevision if another has been stored since, so that no edit silently undoes
        another (None: whatever is current)."""
        if spec.name != name:
            raise SpecInvalid(
                [
                    Problem(
                        ("name",),
                        f"the body names {spec.name!r} but the URL "
                        f"{name!r}; a deployment cannot be renamed: clone it",
                    )
                ]
            )
        with self._write, Session(self.engine) as s:
            deployment = _deployment(s, name)
            if based_on is not None and based_on != deployment.revision:
                raise StaleRevision(
                    f"deployment {name!r} is at revision {deployment.revision}, but this edit "
                    f"was made from revision {based_on}: load revision {deployment.revision} "
                    "and make the change again",
                    deployment.revision,
                )
            previous = _revision(s, deployment, deployment.revision)
            if previous.spec == spec.model_dump(mode="json"):
                return _current(deployment, previous)  # nothing changed: no new revision
            ports = self._admit(s, spec, previous)
            deployment.revision += 1
            deployment.updated_at = utcnow()
            s.add(deployment)
            s.add(_new_revision(deployment, spec, ports, actor, reason))
            s.add(
                Event(
                    actor=actor,
                    kind="deployment.updated",
                    deployment=name,
                    message=f"{name} updated to revision {deployment.revision}"
                    + _why(reason)
                    + _unsafe(spec),
                    detail={
                        "revision": deployment.revision,
                        "previous": previous.number,
                        **_unsafe_detail(spec),
                    },
                )
            )
            _commit(s, name)
        return self.get(name)

    def delete(self, name: str, actor: str, reason: str | None = None) -> None:
        with self._write, Session(self.engine) as s:
            deployment = _deployment(s, name)
            last = _revision(s, deployment, deployment.revision)
            # Revisions go with the row (ON DELETE CASCADE); the event keeps the last one.
            s.add(
                Event(
                    actor=actor,
                    kind="deployment.deleted",
                    deployment=name,
                    message=f"{name} deleted at revision {last.number}" + _why(reason),
                    detail={
                        "revision": last.number,
                        "spec": redact_spec(last.spec),
                        "ports": last.ports,
                    },
                )
            )
            s.delete(deployment)
            s.commit()

    def clone(self, name: str, new_name: str, actor: str, reason: str | None = None) -> Current:
        source = self.get(name)
        spec = without_given_ports(source.spec).model_copy(update={"name": new_name})
        return self.create(
            DeploymentSpec.model_validate(spec.model_dump()),
            actor,
            reason,
            kind="deployment.cloned",
            detail={"source": name, "source_revision": source.revision},
        )

    # -- revisions ----------------------------------------------------------------------

    def revisions(self, name: str) -> list[Revision]:
        with Session(self.engine) as s:
            deployment = _deployment(s, name)
            return list(
                s.exec(
                    select(Revision)
                    .where(Revision.deployment_id == deployment.id)
                    .order_by(col(Revision.number).desc())
                )
            )

    def revision(self, name: str, number: int) -> Revision:
        with Session(self.engine) as s:
            return _revision(s, _deployment(s, name), number)

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
            s.commit()
            s.refresh(event)
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

    # -- admission: validation and ports --------------------------------------------------

    def _admit(self, s: Session, spec: DeploymentSpec, previous: Revision | None) -> AllocatedPorts:
        old = None
        if previous is not None:
            try:  # an unreadable previous revision keeps no ports: they are allocated anew
                old = (_spec_of(spec.name, previous), ports_from_json(previous.ports))
            except (Unreadable, KeyError, TypeError, ValueError):
                old = None
        return admit(self.admission, spec, self._claims(s, exclude=spec.name), old)

    def _claims(self, s: Session, exclude: str) -> dict[int, str]:
        """Each port another deployment's current revision claims, to that deployment."""
        rows = s.exec(
            select(Deployment.name, Revision.spec, Revision.ports)
            .join(
                Revision,
                sa.and_(
                    Revision.deployment_id == Deployment.id, Revision.number == Deployment.revision
                ),
            )
            .where(Deployment.name != exclude)
        )
        claims: dict[int, str] = {}
        for name, spec, ports in rows:
            for port in _claimed(spec, ports):
                claims[port] = name
        return claims


def _claimed(spec: dict, ports: dict) -> set[int]:
    """The ports a stored revision claims; of an unreadable one, every port it lists."""
    try:
        return ports_from_json(ports).claimed(DeploymentSpec.model_validate(spec))
    except (ValidationError, KeyError, TypeError, ValueError):
        return set(_ints(ports))


def _ints(node: object) -> Iterator[int]:
    if isinstance(node, bool):
        return
    if isinstance(node, int):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _ints(v)
    elif isinstance(node, list):
        for v in node:
            yield from _ints(v)


def _deployment(s: Session, name: str) -> Deployment:
    deployment = s.exec(select(Deployment).where(Deployment.name == name)).first()
    if deployment is None:
        raise NotFound(f"no deployment named {name!r}")
    return deployment


def _revision(s: Session, deployment: Deployment, number: int) -> Revision:
    revision = s.exec(
        select(Revision).where(Revision.deployment_id == deployment.id, Revision.number == number)
    ).first()
    if revision is None:
        raise NotFound(
            f"deployment {deployment.name!r} has no revision {number} (current: "
            f"{deployment.revision})"
        )
    return revision


def _current(deployment: Deployment, revision: Revision) -> Current:
    spec = _spec_of(deployment.name, revision)
    try:
        ports = ports_from_json(revision.ports)
    except (KeyError, TypeError, ValueError, ValidationError):
        raise _unreadable(deployment.name, revision.number, ("ports",), "malformed") from None
    return Current(
        deployment.name,
        deployment.revision,
        deployment.created_at,
        deployment.updated_at,
        spec,
        ports,
        revision.actor,
        revision.reason,
    )


def _spec_of(name: str, revision: Revision) -> DeploymentSpec:
    """The stored spec through today's rules, non-finite numbers refused whatever the model
    says; Unreadable naming the first field that fails."""
    places = non_finite(revision.spec)
    if places:
        raise _unreadable(name, revision.number, places[0], "not a finite number")
    try:
        return DeploymentSpec.model_validate(revision.spec)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise _unreadable(name, revision.number, first["loc"], first["msg"]) from None


def _unreadable(name: str, number: int, loc: tuple, why: str) -> Unreadable:
    return Unreadable(name, number, ".".join(str(p) for p in loc) or "spec", why)


def _new_revision(
    deployment: Deployment,
    spec: DeploymentSpec,
    ports: AllocatedPorts,
    actor: str,
    reason: str | None,
) -> Revision:
    return Revision(
        deployment_id=deployment.id,
        number=deployment.revision,
        spec=spec.model_dump(mode="json"),
        ports=ports_to_json(ports),
        actor=actor,
        reason=reason,
    )


def _commit(s: Session, name: str) -> None:
    try:
        s.commit()
    except sa.exc.IntegrityError:  # another writer on the same file won the race
        s.rollback()
        raise Conflict(f"deployment {name!r} changed concurrently; try again") from None


def _why(reason: str | None) -> str:
    return f": {reason}" if reason else ""


def _unsafe(spec: DeploymentSpec) -> str:
    # An override of the engine allowlists is said in every event of a revision carrying it.
    unsafe = spec.unsafe_allow
    return f"; engine allowlists overridden for {unsafe.summary()}" if unsafe else ""


def _unsafe_detail(spec: DeploymentSpec) -> dict:
    unsafe = spec.unsafe_allow
    return {"unsafe_allow": unsafe.model_dump(mode="json")} if unsafe else {}
