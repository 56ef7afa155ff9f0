"""A RolloutLog in memory, for a controller run without a store (tests, embedded use): the
same calls as state/rollout_store.py, forgotten when the process ends."""

from __future__ import annotations

import copy
from typing import Any

ACTIVE = ("running",)


class MemoryLog:
    def __init__(self) -> None:
        self._rows: dict[int, dict[str, Any]] = {}
        self._samples: dict[tuple[str, str], list[float]] = {}

    def new_rollout(self, name: str, body: dict[str, Any]) -> int:
        number = len(self._rows) + 1
        self._rows[number] = {**copy.deepcopy(body), "id": str(number), "deployment": name}
        return number

    def save_rollout(self, rollout_id: int, body: dict[str, Any]) -> None:
        if rollout_id not in self._rows:
            raise KeyError(f"no rollout {rollout_id}")
        self._rows[rollout_id] = {**copy.deepcopy(body), "id": str(rollout_id)}

    def rollouts(self, name: str, limit: int = 50) -> list[dict[str, Any]]:
        mine = [r for n, r in sorted(self._rows.items(), reverse=True) if r["deployment"] == name]
        return copy.deepcopy(mine[:limit])

    def unfinished(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(r) for _, r in sorted(self._rows.items()) if r["state"] in ACTIVE]

    def settle_change(
        self, name: str, revision: int, state: str, detail: str | None = None
    ) -> None:
        """No revisions here: nothing to settle."""

    def add_start_samples(self, name: str, group: str, seconds: list[float]) -> None:
        kept = self._samples.setdefault((name, group), [])
        kept.extend(seconds)
        del kept[:-200]

    def start_samples(self, name: str, per_group: int = 20) -> dict[str, list[float]]:
        return {g: s[-per_group:] for (n, g), s in self._samples.items() if n == name}
