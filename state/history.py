"""The downsampled history in SQLite (table `history`): write points, read a window, prune.
Blocking calls; the scraper runs them in a worker thread."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, delete, select

from state.models import HistoryPoint


class History:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def write(self, points: list[tuple[str, float, dict[str, Any]]]) -> None:
        if not points:
            return
        with Session(self.engine) as s:
            s.add_all(HistoryPoint(deployment=d, ts=ts, data=data) for d, ts, data in points)
            s.commit()

    def read(self, deployment: str, since: float, limit: int = 20_000) -> list[dict[str, Any]]:
        """Points of `deployment` from `since` (epoch seconds) on, oldest first."""
        query = (
            select(HistoryPoint.data)
            .where(HistoryPoint.deployment == deployment, HistoryPoint.ts >= since)
            .order_by(col(HistoryPoint.ts).desc())
            .limit(limit)
        )
        with Session(self.engine) as s:
            return list(reversed(s.exec(query).all()))

    def prune(self, before: float) -> int:
        with Session(self.engine) as s:
            result = s.exec(delete(HistoryPoint).where(col(HistoryPoint.ts) < before))
            s.commit()
            return result.rowcount or 0
