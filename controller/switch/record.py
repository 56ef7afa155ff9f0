"""What an operator watches of a mode switch: its steps, where it is, how it ended, and the
revision it writes. A switch's id names its revision ("r7"), so a switch whose runner is gone
(the control plane restarted) is still found, and shown, from its stored revision. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from state.changes import RevisionState

IN_PROGRESS = RevisionState.IN_PROGRESS.value
_REASON = re.compile(r"^mode switch to (?P<target>\w+) \((?P<strategy>[\w-]+)\)(?:: (?P<why>.*))?$")
# A revision's state -> the record's: running until the revision is settled.
_RECORD_STATE = {IN_PROGRESS: "running", RevisionState.APPLIED.value: "done"}


@dataclass
class SwitchRecord:
    id: str
    deployment: str
    target: str
    strategy: str
    actor: str
    reason: str | None
    steps: list[str]
    state: str = "running"  # running | done | failed
    current: str | None = None
    started_at: float = 0.0
    ended_at: float | None = None
    held_s: float | None = None  # hold: how long new requests waited
    degraded_s: float | None = None  # keep-serving: how long requests ran whole
    rejected: int | None = None  # requests the proxy refused (503) during the switch
    revision: int = 0  # the target revision, written before any instance restarts
    revision_state: str = IN_PROGRESS  # in_progress | applied | failed | rolled_back
    failed_step: str | None = None  # the step that raised, if one did
    undo_left: list[str] = field(default_factory=list)  # what undo could not put back
    error: str | None = None
    timings: list[dict[str, Any]] = field(default_factory=list)
    stored_only: bool = False  # read back from the store: no runner of this plane ran it
    forecast: dict[str, Any] | None = None  # what the strategy was forecast to take and cost

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def record_id(revision: int) -> str:
    return f"r{revision}"


def revision_of(switch_id: str) -> int | None:
    """The revision a switch id names, or None if it names none."""
    return int(switch_id[1:]) if re.fullmatch(r"r[1-9][0-9]{0,9}", switch_id) else None


def strategy_of(reason: str | None) -> str | None:
    """The strategy a switch's revision was written with (its reason says it)."""
    said = _REASON.match(reason or "")
    return said["strategy"] if said else None


def from_revision(
    name: str, revision: int, state: str, actor: str, reason: str | None, started_at: float
) -> SwitchRecord | None:
    """A switch as its stored revision tells it; None if the revision is not a switch's."""
    said = _REASON.match(reason or "")
    if said is None:
        return None
    rec = SwitchRecord(
        record_id(revision),
        name,
        said["target"],
        said["strategy"],
        actor,
        said["why"],
        [],
        state=_RECORD_STATE.get(state, "failed"),
        started_at=started_at,
        revision=revision,
        revision_state=state,
        stored_only=True,
    )
    if state == IN_PROGRESS:
        rec.current = "unknown: the control plane that ran this switch stopped"
    return rec


def settle_detail(rec: SwitchRecord) -> str | None:
    """What the settled revision says of the switch: which step failed and why."""
    if rec.error is None:
        return f"switch {rec.id} done"
    left = "; not undone: " + "; ".join(rec.undo_left) if rec.undo_left else ""
    return f"switch {rec.id} failed at {rec.failed_step!r}: {rec.error}{left}"[:500]


def outcome_message(rec: SwitchRecord) -> str:
    """The switch.done / switch.failed event's message."""
    took = (rec.ended_at or rec.started_at) - rec.started_at
    verdict = "done" if rec.state == "done" else "failed"
    message = (
        f"{rec.deployment}: switch to {rec.target} mode by {rec.strategy} {verdict} in "
        f"{took:.1f} s (revision {rec.revision} {rec.revision_state.replace('_', ' ')})"
    )
    if rec.held_s is not None:
        message += f"; requests held {rec.held_s:.2f} s"
    if rec.degraded_s is not None:
        message += f"; whole requests (no hand-off) for {rec.degraded_s:.2f} s"
    if rec.rejected:
        message += f"; {rec.rejected} rejected with 503"
    if rec.error:
        message += f": {rec.error}"
    if rec.undo_left:
        message += "; not undone: " + "; ".join(rec.undo_left)
    return message
