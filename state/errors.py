"""The errors the store raises, leaves of pdctl's error tree (domain/errors.py documents the
whole tree; web/errors.py renders it). Each carries its HTTP status and a title."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from domain.errors import Conflict, NotFound, PdctlError

__all__ = ["ChangeInProgress", "Conflict", "NotFound", "PdctlError", "StaleRevision", "Unreadable"]


class Unreadable(Conflict):
    title = "Stored revision cannot be read"

    def __init__(self, name: str, revision: int, field: str, why: str) -> None:
        super().__init__(
            f"deployment {name!r} revision {revision} as stored cannot be read ({field}: "
            f"{why}); replace it (PUT /api/deployments/{name} or the edit form) or delete it"
        )
        self.name, self.revision = name, revision


class StaleRevision(Conflict):
    title = "Edited from an old revision"

    def __init__(self, message: str, current: int) -> None:
        super().__init__(message)
        self.current = current

    def headers(self) -> dict[str, str]:
        return {"ETag": f'"{self.current}"'}


class ChangeInProgress(Conflict):
    """Another writer while a change (a mode switch) has a revision in progress, or while a
    rollout (state/rollout_store.py) holds the deployment: then it names the rollout, where
    it is, and the two commands that watch and end it."""

    title = "A change is in progress"

    def __init__(
        self,
        name: str,
        revision: int,
        reason: str | None = None,
        rollout: Mapping[str, Any] | None = None,
    ) -> None:
        held = (
            f": rollout {rollout.get('id')} ({_doing(rollout)}) holds it: watch it with "
            f"`pdctl rollout status {name}`, end it with `pdctl rollout abort {name}`"
            if rollout is not None
            else ": nothing else can change it until that change is applied, failed or rolled back"
        )
        super().__init__(
            f"deployment {name!r} has revision {revision} in progress"
            + (f" ({reason})" if reason else "")
            + held
        )
        self.name, self.revision = name, revision
        self.rollout_id: int | None = rollout.get("id") if rollout is not None else None


def _doing(rollout: Mapping[str, Any]) -> str:
    """What the rollout is doing, as in "switch by roll, step 2/10: drain prefill-0", from its
    record: `step_index` counts from 0 into `steps`; `current` says what that step does."""
    said = f"{rollout.get('kind')} by {rollout.get('strategy')}"
    step = ""
    index, steps = rollout.get("step_index"), rollout.get("steps")
    if isinstance(index, int) and isinstance(steps, list | tuple):
        step = f"step {index + 1}/{len(steps)}"
    current = rollout.get("current")
    if current:
        step = f"{step}: {current}" if step else str(current)
    return f"{said}, {step}" if step else said
