"""What one rollout is asked to do (a Goal toward a Target), the run that carries it out,
where rollouts are kept (RolloutLog), and the refusal of any other change while one runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.launch.ports import AllocatedPorts
from controller.rollout.record import RolloutRecord
from controller.spec.deployment import DeploymentSpec
from controller.switch.plan import Step
from controller.switch.steps import AdminCalls
from domain.errors import Conflict

ACTOR = "controller"


class RolloutBusy(Conflict):
    """A rollout holds the deployment; the message names it and the verbs that end it."""

    title = "A rollout is in progress"


class RolloutLog(Protocol):
    """Where rollouts and the revisions they settle are kept (state/store/)."""

    def new_rollout(self, name: str, body: dict[str, Any]) -> int: ...
    def save_rollout(self, rollout_id: int, body: dict[str, Any]) -> None: ...
    def rollouts(self, name: str, limit: int = ...) -> list[dict[str, Any]]: ...
    def unfinished(self) -> list[dict[str, Any]]: ...
    def start_samples(self, name: str, per_group: int = ...) -> dict[str, list[float]]: ...
    def add_start_samples(self, name: str, group: str, seconds: list[float]) -> None: ...
    def settle_change(
        self, name: str, revision: int, state: str, detail: str | None = None
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Target:
    """A revision as it runs: its number, spec and ports."""

    revision: int
    spec: DeploymentSpec
    ports: AllocatedPorts


TargetLoader = Callable[[str, int], Target]  # (deployment, revision) -> Target


@dataclass
class Goal:
    """What one rollout is asked to do."""

    name: str
    target: Target
    kind: str
    actor: str
    reason: str | None = None
    strategy: str | None = None  # None: roll where the layout allows it, else hold
    steps: list[Step] | None = None  # planned elsewhere (a mode switch's, a role move's)
    settles: bool = True  # the target revision is in progress: the rollout settles it
    back: Target | None = None  # where a failure rolls back to (the last applied revision)
    auto_rollback: bool = True
    switch_mode: str | None = None  # a mode switch's target mode
    forecast: dict[str, Any] | None = None
    mover: Callable[[Step], Awaitable[None]] | None = None  # a role move's step
    force: set[str] | None = None  # a restart: these restart even if unchanged (None: all)
    # The proxy's calls when it is not the one the supervisor runs (an attached deployment's)
    admin: AdminCalls | None = None


@dataclass
class Run:
    """A rollout as the engine carries it out: its goal, its record and its steps."""

    goal: Goal
    rec: RolloutRecord
    steps: list[Step]
    urls: dict[str, str] = field(default_factory=dict)
    aborted_by: str | None = None
    # How the steps ended (done | failed | aborted); the record says so only once settled,
    # so a reader never sees it ended with its revision still in progress.
    outcome: str | None = None
    rollback_ok: bool | None = None
    inline: int = 0  # steps the caller waits for (a start's first: its errors are the caller's)
    inline_done: asyncio.Future | None = None
    # A rollback taken over from a stopped plane: the rollout it rolls back, whose revision
    # is still in progress, settled once this ends (else nothing would release it).
    rolls_back: RolloutRecord | None = None
    # Groups a hold left paused, and instances keep-serving left serving whole requests,
    # for its rollback to release: what served the requests otherwise may be down, and
    # requests let go now would meet nothing to serve them.
    held: set[str] = field(default_factory=set)
    whole: set[str] = field(default_factory=set)


def tell(run: Run, raised: BaseException | None) -> None:
    """The caller waiting for the inline steps learns how they went (once)."""
    if run.inline_done is not None and not run.inline_done.done():
        run.inline_done.set_result(raised)


def busy_message(rec: RolloutRecord, verb: str = "change") -> str:
    return (
        f"{rec.deployment!r} cannot {verb} now: {rec.describe()} holds it; watch it with "
        f"`pdctl rollout status {rec.deployment}`, end it with "
        f"`pdctl rollout abort {rec.deployment}`"
    )
