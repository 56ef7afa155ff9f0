"""When a start or stop is over, from the status rows the API gives: every instance RUNNING,
or every one down; an instance that gave up (FATAL) ends a start as failed, naming it. (A
restart is a rollout, followed by terminal/verbs/rollout_follow.py.) Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Unit = dict[str, Any]
DOWN = frozenset({"STOPPED", "EXITED", "FATAL"})
UP = "RUNNING"


@dataclass(frozen=True)
class Goal:
    """What the verb waits for: `up` or `down`."""

    want: str

    def verdict(self, units: list[Unit]) -> tuple[bool, str | None]:
        """(over, why it failed or None)."""
        if self.want == "down":
            return all(u["state"] in DOWN for u in units), None
        fatal = [u for u in units if u["state"] == "FATAL"]
        if fatal:
            return True, "; ".join(_gave_up(u) for u in fatal)
        return bool(units) and all(u["state"] == UP for u in units), None


def _gave_up(unit: Unit) -> str:
    exit_code = unit.get("last_exit_code")
    said = f"{unit['name']} is FATAL (gave up after {unit.get('failures', 0)} failed start(s)"
    said += f", last exit code {exit_code})" if exit_code is not None else ")"
    if unit.get("log_error"):
        said += f": {unit['log_error']}"
    return said


def summary(units: list[Unit]) -> str:
    """`3 instances: 2 RUNNING, 1 STARTING`."""
    counts: dict[str, int] = {}
    for u in units:
        counts[u["state"]] = counts.get(u["state"], 0) + 1
    said = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    return f"{len(units)} processes: {said}" if units else "no processes"


def changes(before: dict[str, str], units: list[Unit]) -> list[str]:
    """`decode-0: STARTING -> RUNNING` for each process whose state moved since `before`."""
    return [
        f"{u['name']}: {before.get(u['name'], '-')} -> {u['state']}"
        for u in units
        if before.get(u["name"]) != u["state"]
    ]
