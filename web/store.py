"""The SQLite repository: deployments with their revisions, allocated ports and events.

Every change to a deployment writes a new revision and an event in one transaction. Writes
are serialized by a lock, so that checking other deployments' ports and claiming new ones
cannot interleave between two requests of this server.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from controller.deployment import DeploymentSpec, InstancePorts
from controller.ports import AllocatedPorts
from controller.redact import redact_spec
from controller.validation import Problem
from web.admission import Admission, admit, without_given_ports
from web.errors import Conflict, NotFound, SpecInvalid
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
        with Session(self.engine) as s:
            rows = s.exec(
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
            return [_current(d, r) for d, r in rows]

    def get(self, name: str) -> Current:
        with Session(self.engine) as s:
            deployment = _deployment(s, name)
            return _current(deployment, _revision(s, deployment, deployment.revision))

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
                    message=f"{spec.name} {verb} (revision 1)" + _why(reason),
                    detail={"revision": 1, **(detail or {})},
                )
            )
            _commit(s, spec.name)
        return self.get(spec.name)

    def update(
        self, name: str, spec: DeploymentSpec, actor: str, reason: str | None = None
    ) -> Current:
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
                    message=f"{name} updated to revision {deployment.revision}" + _why(reason),
                    detail={"revision": deployment.revision, "previous": previous.number},
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
            old = (DeploymentSpec.model_validate(previous.spec), ports_from_json(previous.ports))
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
            for port in ports_from_json(ports).claimed(DeploymentSpec.model_validate(spec)):
                claims[port] = name
        return claims


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
    return Current(
        deployment.name,
        deployment.revision,
        deployment.created_at,
        deployment.updated_at,
        DeploymentSpec.model_validate(revision.spec),
        ports_from_json(revision.ports),
        revision.actor,
        revision.reason,
    )


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
