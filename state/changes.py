"""Revision states, defined once, and the rule every writer meets while a change is under way.

    in_progress   written first, as the deployment's desired revision, before reality moves
     +-> applied      reality reached it
     +-> failed       it did not; the previous applied revision is desired again
     +-> rolled_back  it was undone; the previous applied revision is desired again

Every revision written by an edit is applied at once (nothing reconciles it in between).
While a deployment has a revision in progress, any other change (an edit with or without
If-Match, a delete, another change) is `ChangeInProgress`, a 409 naming that revision. The
state is stored, so after a control-plane restart the revision is still in progress, and
still settleable.
"""

from __future__ import annotations

import enum
import threading
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa
from sqlmodel import Session

from state import rows
from state.errors import ChangeInProgress, Conflict
from state.models import Deployment, Event, Revision, utcnow

if TYPE_CHECKING:
    from state.store import SpecRules


class RevisionState(enum.StrEnum):
    IN_PROGRESS = "in_progress"
    APPLIED = "applied"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"


SETTLED = (RevisionState.APPLIED, RevisionState.FAILED, RevisionState.ROLLED_BACK)


class StoreCore(Protocol):
    """What Changes uses of the Store it is mixed into (mypy's protocol self-type for mixins)."""

    engine: sa.Engine
    rules: SpecRules
    _write: threading.Lock

    def _admit(self, s: Session, spec: Any, previous: Revision | None) -> Any: ...
    def _commit(self, s: Session, name: str, *events: Event) -> None: ...
    def _said(self, spec: Any) -> str: ...
    def _unsafe_detail(self, spec: Any) -> dict: ...
    def _refuse_while_in_progress(self, s: Session, dep: Deployment) -> None: ...
    def _new_revision(
        self,
        dep: Deployment,
        number: int,
        spec: Any,
        ports: Any,
        actor: str,
        reason: str | None,
        state: RevisionState = ...,
    ) -> Revision: ...


class Changes:
    """The store's changes that reality catches up with (a mode switch): begun, settled."""

    def in_progress(self: StoreCore, name: str) -> int | None:
        """The number of the deployment's revision in progress, if one is."""
        with Session(self.engine) as s:
            found = rows.in_state(s, rows.deployment(s, name), RevisionState.IN_PROGRESS)
            return found[0].number if found else None

    def begin_change(
        self: StoreCore,
        name: str,
        spec: Any,
        actor: str,
        reason: str | None,
        kind: str = "switch",
    ) -> int:
        """Write `spec` as the next revision, in progress, and make it the desired one;
        ChangeInProgress if one already is. Returns its number."""
        refused = self.rules.renamed(name, spec)
        if refused is not None:
            raise refused
        with self._write, Session(self.engine) as s:
            dep = rows.deployment(s, name)
            self._refuse_while_in_progress(s, dep)
            previous = rows.revision(s, dep, dep.revision)
            ports = self._admit(s, spec, previous)
            number = rows.next_number(s, dep)
            dep.revision, dep.updated_at = number, utcnow()
            s.add(dep)
            state = RevisionState.IN_PROGRESS
            s.add(self._new_revision(dep, number, spec, ports, actor, reason, state))
            event = Event(
                actor=actor,
                kind="revision.in_progress",
                deployment=name,
                message=f"{name}: revision {number} in progress ({kind})"
                + rows.why(reason)
                + self._said(spec),
                detail={
                    "revision": number,
                    "previous": previous.number,
                    "change": kind,
                    **self._unsafe_detail(spec),
                },
            )
            s.add(event)
            self._commit(s, name, event)
        return number

    def settle_change(
        self: StoreCore, name: str, revision: int, state: str, detail: str | None = None
    ) -> None:
        """Record how the change to `revision` ended: applied, failed or rolled_back. On
        failed or rolled_back the previous applied revision is desired again."""
        outcome = RevisionState(state)
        if outcome not in SETTLED:
            raise ValueError(f"a change settles as one of {[s.value for s in SETTLED]}")
        with self._write, Session(self.engine) as s:
            dep = rows.deployment(s, name)
            row = rows.revision(s, dep, revision)
            if row.state != RevisionState.IN_PROGRESS:
                raise Conflict(
                    f"deployment {name!r} revision {revision} is {row.state}, not in progress"
                )
            row.state = outcome.value
            s.add(row)
            message = f"{name}: revision {revision} {outcome.value.replace('_', ' ')}"
            facts: dict[str, Any] = {"revision": revision, "state": outcome.value}
            if outcome is not RevisionState.APPLIED:
                back = _previous_applied(s, dep, revision)
                if back is not None and dep.revision == revision:
                    dep.revision, dep.updated_at = back, utcnow()
                    s.add(dep)
                    message += f"; revision {back} is desired again"
                    facts["desired"] = back
            if detail:
                message += f": {detail}"
                facts["detail"] = detail
            event = Event(
                actor="controller",
                kind=f"revision.{outcome.value}",
                deployment=name,
                message=message,
                detail=facts,
            )
            s.add(event)
            self._commit(s, name, event)

    def _refuse_while_in_progress(self: StoreCore, s: Session, dep: Deployment) -> None:
        found = rows.in_state(s, dep, RevisionState.IN_PROGRESS)
        if found:
            raise ChangeInProgress(dep.name, found[0].number, found[0].reason)


def _previous_applied(s: Session, dep: Deployment, below: int) -> int | None:
    for row in rows.in_state(s, dep, RevisionState.APPLIED):
        if row.number < below:
            return row.number
    return None
