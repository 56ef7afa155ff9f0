"""What every part of the store stands on (state/store/): the engine, the spec rules, the
write lock, `Current` (a deployment as it stands), and the steps taken inside a write: commit
and publish, load through today's rules, admit ports against the other deployments' claims."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from state import rows
from state.changes import RevisionState
from state.errors import Unreadable
from state.models import Deployment, Event, Revision
from state.store.rules import SpecRules, Unfit


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


class StoreBase:
    """The engine, rules and write lock, and the steps inside a write that every part uses."""

    def __init__(
        self,
        engine: sa.Engine,
        rules: SpecRules,
        publish: Callable[[Event], None] | None = None,
    ) -> None:
        self.engine, self.rules = engine, rules
        self.publish = publish
        self._write = threading.Lock()

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
