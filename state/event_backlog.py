"""Events that could not be written (a full disk, a damaged or locked database) kept in memory
and logged, then written, oldest first, once a write works again: a restart the supervisor
did must leave its event even when the disk was full at the time (issue 39). Bounded: past
`keep` events the oldest kept is dropped, and the drop is counted in the next one written."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

log = logging.getLogger("pdctl.events")
Record = Callable[..., Any]  # Store.record(actor, kind, message, deployment, detail)
WRITE_FAILURES = (sa.exc.OperationalError, sa.exc.DatabaseError, OSError)


class EventBacklog:
    def __init__(
        self, record: Record, keep: int = 1000, wall: Callable[[], float] = time.time
    ) -> None:
        self._record, self._wall = record, wall
        self._waiting: deque[tuple[str, str, str, str | None, dict[str, Any]]] = deque(maxlen=keep)
        self.dropped = 0

    def __call__(
        self,
        actor: str,
        kind: str,
        message: str,
        deployment: str | None = None,
        detail: dict | None = None,
    ) -> Any:
        """Record the event (after any still waiting); None if it had to wait itself."""
        self.flush()
        if self._waiting:  # still failing: keep order, this one waits behind them
            self._keep(actor, kind, message, deployment, detail)
            return None
        try:
            return self._record(actor, kind, message, deployment, detail)
        except WRITE_FAILURES as exc:
            log.warning("event kept in memory, not written (%s): %s %s", exc, kind, message)
            self._keep(actor, kind, message, deployment, detail)
            return None

    def waiting(self) -> int:
        return len(self._waiting)

    def flush(self) -> None:
        """Write what waits, oldest first, until one fails."""
        while self._waiting:
            actor, kind, message, deployment, detail = self._waiting[0]
            if self.dropped:
                detail = {**detail, "dropped_before": self.dropped}
            try:
                self._record(actor, kind, message, deployment, detail)
            except WRITE_FAILURES:
                return
            self._waiting.popleft()
            self.dropped = 0

    def _keep(
        self, actor: str, kind: str, message: str, deployment: str | None, detail: dict | None
    ) -> None:
        if len(self._waiting) == self._waiting.maxlen:
            self.dropped += 1
        at = {"happened_at": self._wall(), "written_late": True}
        self._waiting.append((actor, kind, message, deployment, {**(detail or {}), **at}))
