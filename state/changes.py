"""Revision states, defined once, and the rule every writer meets while a change is under way.

    pending       stored as the desired revision, not running yet: a new deployment, a
     |            stopped one's edit, a running one's edit before its rollout
     |            (`Store.update(pending=True)`, which pdctl's every edit uses)
     +-> in_progress   a rollout began it (begin_stored)
     +-> applied   a start has every process of it running and ready (settle_change); a
     |             start that fails leaves it pending
     +-> superseded   a newer revision was stored before it ran: it never runs
    in_progress   written first as the desired revision, before reality moves (begin_change);
                  or begun from pending, or re-applied from a settled state (begin_stored)
     +-> applied      reality reached it
     +-> failed       it did not; the newest other applied revision is desired again
     +-> rolled_back  it was undone; the newest other applied revision is desired again

A revision is applied only once every process of it runs and is ready. (`Store.update`
without `pending` still writes an applied revision, for callers that apply it themselves.)
While a deployment has a revision in progress, or an active rollout holds it
(state/rollout_store.py), any other change (an edit with or without If-Match, a delete,
another change) is `ChangeInProgress`, a 409 naming that revision and
the rollout. The state is stored, so after a control-plane restart the revision is still in
progress, and still settleable.
"""

from __future__ import annotations

import enum
import threading
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa
from sqlmodel import Session

from state import rollout_store, rows
from state.errors import ChangeInProgress, Conflict
from state.models import Deployment, Event, Revision, utcnow

if TYPE_CHECKING:
    from state.store import SpecRules


class RevisionState(enum.StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    APPLIED = "applied"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"
    SUPERSEDED = "superseded"  # pending, then a newer revision was stored: it never runs


SETTLED = (
    RevisionState.APPLIED,
    RevisionState.FAILED,
    RevisionState.ROLLED_BACK,
    RevisionState.SUPERSEDED,
)
SETTLEABLE = (RevisionState.IN_PROGRESS, RevisionState.PENDING)


class StoreCore(Protocol):
    """What Changes uses of the Store it is mixed into (mypy's protocol self-type for mixins)."""

    engine: sa.Engine
    rules: SpecRules
    _write: threading.Lock

    def _admit(self, s: Session, spec: Any, previous: Revision | None) -> Any: ...
    def _commit(self, s: Session, name: str, *events: Event) -> None: ...
    def _said(self, spec: Any) -> str: ...
    def _unsafe_detail(self, spec: Any) -> dict: ...
    def _load(self, name: str, revision: Revision) -> tuple[Any, Any]: ...
    def _claims(self, s: Session, exclude: str) -> dict[int, str]: ...
    def _refuse_while_in_progress(
        self, s: Session, dep: Deployment, holder: int | None = None
    ) -> None: ...
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
        *,
        rollout_id: int | None = None,
    ) -> int:
        """Write `spec` as the next revision, in progress, and make it the desired one;
        ChangeInProgress if one already is, or if a rollout other than `rollout_id` (the one
        making this change) holds the deployment. Returns its number."""
        refused = self.rules.renamed(name, spec)
        if refused is not None:
            raise refused
        with self._write, Session(self.engine) as s:
            dep = rows.deployment(s, name)
            self._refuse_while_in_progress(s, dep, rollout_id)
            previous = rows.revision(s, dep, dep.revision)
            ports = self._admit(s, spec, previous)
            supersede(s, previous)
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

    def begin_stored(
        self: StoreCore,
        name: str,
        number: int,
        actor: str,
        reason: str | None,
        kind: str,
        *,
        rollout_id: int | None = None,
    ) -> None:
        """Begin rolling out stored revision `number`: pending, or settled and re-applied.
        It becomes in progress and the desired one. ChangeInProgress as begin_change;
        NotFound for no such revision; Unreadable if today's rules refuse it; Conflict if
        another deployment now claims a port it was given."""
        with self._write, Session(self.engine) as s:
            dep = rows.deployment(s, name)
            row = rows.revision(s, dep, number)
            self._refuse_while_in_progress(s, dep, rollout_id)
            spec, _ = self._load(name, row)
            others = self._claims(s, exclude=name)
            taken = sorted(p for p in self.rules.claimed(row.spec, row.ports) if p in others)
            if taken:
                raise Conflict(
                    f"deployment {name!r} revision {number} was given port {taken[0]}, which "
                    f"{others[taken[0]]!r} now claims: store it again as a new revision "
                    "(an edit) to be given free ports"
                )
            previous = dep.revision if dep.revision != number else _previous_applied(s, dep, number)
            was = row.state
            row.state = RevisionState.IN_PROGRESS.value
            dep.revision, dep.updated_at = number, utcnow()
            s.add_all((row, dep))
            event = Event(
                actor=actor,
                kind="revision.in_progress",
                deployment=name,
                message=f"{name}: revision {number} in progress ({kind}, was {was})"
                + rows.why(reason)
                + self._said(spec),
                detail={
                    "revision": number,
                    "previous": previous,
                    "change": kind,
                    "was": was,
                    **self._unsafe_detail(spec),
                },
            )
            s.add(event)
            self._commit(s, name, event)

    def settle_change(
        self: StoreCore, name: str, revision: int, state: str, detail: str | None = None
    ) -> None:
        """Record how the change to `revision` (in progress, or pending: a stopped deployment
        started at it) ended: applied, failed or rolled_back. On failed or rolled_back the
        newest other applied revision is desired again."""
        outcome = RevisionState(state)
        if outcome not in SETTLED:
            raise ValueError(f"a change settles as one of {[s.value for s in SETTLED]}")
        with self._write, Session(self.engine) as s:
            dep = rows.deployment(s, name)
            row = rows.revision(s, dep, revision)
            if row.state not in SETTLEABLE:
                raise Conflict(
                    f"deployment {name!r} revision {revision} is {row.state}, "
                    "not in progress or pending"
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

    def _refuse_while_in_progress(
        self: StoreCore, s: Session, dep: Deployment, holder: int | None = None
    ) -> None:
        """ChangeInProgress while a revision is in progress, or while an active rollout other
        than `holder` holds the deployment (a restart rollout has no revision in progress)."""
        found = rows.in_state(s, dep, RevisionState.IN_PROGRESS)
        held = rollout_store.active(s, dep.name)
        body = held.body if held is not None else None
        if found:
            raise ChangeInProgress(dep.name, found[0].number, found[0].reason, body)
        if held is not None and held.id != holder:
            raise ChangeInProgress(dep.name, held.revision, held.body.get("reason"), body)


def supersede(s: Session, desired: Revision) -> None:
    """A pending revision a newer one replaces never runs: it is superseded, not left
    pending for ever."""
    if desired.state == RevisionState.PENDING.value:
        desired.state = RevisionState.SUPERSEDED.value
        s.add(desired)


def _previous_applied(s: Session, dep: Deployment, other_than: int) -> int | None:
    """The newest applied revision but `other_than`: pending, failed and rolled back ones
    never ran whole. Newer than a revision a rollout re-applies, it is what still runs."""
    for row in rows.in_state(s, dep, RevisionState.APPLIED):
        if row.number != other_than:
            return row.number
    return None
