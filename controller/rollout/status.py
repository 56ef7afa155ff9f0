"""Pure: the truth of each process against the desired revision: the revision it runs, the one
desired, whether it drifted, and why (the same judgement a rollout makes: changes.py)."""

from __future__ import annotations

from typing import Any

from controller.launch.process import Launch
from controller.rollout.changes import Action, Running, changes

RunningRow = tuple[Launch, str, bool | None, int | None]  # Supervisor.running's value


def instance_truth(
    running: dict[str, RunningRow], desired: list[Launch], revision: int
) -> list[dict[str, Any]]:
    now = {n: Running(*row) for n, row in running.items()}
    out = []
    for change in changes(now, desired):
        row = now.get(change.name)
        drifted = change.action is not Action.KEEP or bool(change.why)
        out.append(
            {
                "name": change.name,
                "role": change.role,
                "state": row.state if row else "NOT STARTED",
                "revision": row.revision if row else None,
                "desired_revision": None if change.action is Action.STOP else revision,
                "drifted": drifted,
                "action": change.action.value,
                "why": change.why or None,
            }
        )
    return out


def applied(truth: list[dict[str, Any]]) -> bool:
    """Every process of the desired revision runs it and is ready."""
    return all(not t["drifted"] and t["state"] == "RUNNING" for t in truth)
