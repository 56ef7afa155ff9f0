"""What an operator watches of a rollout: what it changes, its steps with their deadlines and
state, where it is, how it ended, and the revision it settles. One record shape for every
kind of change (a mode switch keeps the fields it always showed: target, held_s, ...). The
record is written to the store at every step, so it outlives the control plane. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from state.changes import RevisionState

IN_PROGRESS = RevisionState.IN_PROGRESS.value
RUNNING = "running"
DONE = "done"
FAILED = "failed"
ABORTED = "aborted"
ENDED = (DONE, FAILED, ABORTED)

# What each kind of rollout is for (the record's `kind`).
KINDS = (
    "start",  # a stopped deployment's processes, at its desired revision
    "apply",  # a stored revision rolled out to a running deployment
    "restart",  # the desired revision again: what drifted, or every instance
    "switch",  # a read/write mode switch
    "role_move",  # one instance moved between prefill and decode, in place
    "advisor",  # an advisor's proposal
    "undo",  # an earlier revision, as a new one
    "rollback",  # back to the last applied revision after a failed or aborted rollout
)


@dataclass
class StepState:
    step: str
    state: str = "pending"  # pending | running | done | failed | skipped
    deadline_s: float = 0.0
    seconds: float | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class RolloutRecord:
    id: str
    deployment: str
    target: str | None  # a switch's mode; None for other kinds
    strategy: str
    actor: str
    reason: str | None
    steps: list[str]
    state: str = RUNNING  # running | done | failed | aborted
    current: str | None = None
    started_at: float = 0.0
    ended_at: float | None = None
    held_s: float | None = None  # hold: how long new requests waited
    degraded_s: float | None = None  # keep-serving: how long requests ran whole
    rejected: int | None = None  # requests the proxy refused (503) during the rollout
    revision: int = 0  # the revision it rolls out
    revision_state: str = IN_PROGRESS  # how that revision settled
    failed_step: str | None = None  # the step that raised, if one did
    undo_left: list[str] = field(default_factory=list)  # routing undo could not put back
    error: str | None = None
    timings: list[dict[str, Any]] = field(default_factory=list)
    stored_only: bool = False  # read back from the store: no engine of this plane ran it
    forecast: dict[str, Any] | None = None  # what it was forecast to take and cost
    kind: str = "switch"
    from_revision: int | None = None  # the last applied revision: a rollback goes there
    step_states: list[StepState] = field(default_factory=list)
    step_index: int = 0  # the step under way (0-based); len(steps) once all ran
    deadline_at: float | None = None  # wall clock: every step's deadline added up
    changes: dict[str, list[str]] = field(default_factory=dict)  # restart/start/stop/keep
    why: dict[str, str] = field(default_factory=dict)  # instance -> why it changes
    auto_rollback: bool = True
    rollback_of: str | None = None  # this rollout rolls back that one
    rolled_back_by: str | None = None  # the rollout that rolled this one back
    aborted_by: str | None = None
    resumed: int = 0  # times a restarted control plane took it over

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["step_states"] = [s.to_json() for s in self.step_states]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RolloutRecord:
        known = {f.name for f in fields(cls)}
        given = {k: v for k, v in data.items() if k in known}
        given["id"] = str(given.get("id", ""))
        given["step_states"] = [StepState(**s) for s in data.get("step_states") or []]
        return cls(**given)

    @property
    def active(self) -> bool:
        return self.state == RUNNING

    def describe(self) -> str:
        """`rollout 12 (apply by roll, step 3/10: drain prefill-0)`."""
        where = ""
        if self.active and self.steps:
            at = min(self.step_index + 1, len(self.steps))
            where = f", step {at}/{len(self.steps)}" + (f": {self.current}" if self.current else "")
        return f"rollout {self.id} ({self.kind} by {self.strategy}{where})"


def settle_detail(rec: RolloutRecord) -> str | None:
    """What the settled revision says of the rollout: which step failed and why."""
    if rec.error is None:
        return f"rollout {rec.id} done"
    left = "; not undone: " + "; ".join(rec.undo_left) if rec.undo_left else ""
    return f"rollout {rec.id} failed at {rec.failed_step!r}: {rec.error}{left}"[:500]


def outcome_message(rec: RolloutRecord) -> str:
    """The rollout's (and a switch's) done / failed event message."""
    took = (rec.ended_at or rec.started_at) - rec.started_at
    what = (
        f"switch to {rec.target} mode by {rec.strategy}"
        if rec.kind == "switch"
        else f"{rec.kind} rollout {rec.id} by {rec.strategy}"
    )
    settled = f" {rec.revision_state.replace('_', ' ')}" if rec.revision_state else ""
    message = (
        f"{rec.deployment}: {what} {rec.state} in {took:.1f} s (revision {rec.revision}{settled})"
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
