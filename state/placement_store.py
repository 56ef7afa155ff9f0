"""Where each process of a deployment was last placed (`placements`): kept whole when the
deployment starts, one process at a time when it moves, read back for the API. A row goes
with its deployment (ON DELETE CASCADE)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import insert
from sqlmodel import Session, col, select

from state.models import Placement, utcnow


@dataclass(frozen=True, slots=True)
class PlacedProcess:
    """One process on one node, as the controller placed it."""

    process: str
    node_id: str
    node_address: str
    gpus: float = 0.0


class PlacementStore:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def keep(
        self,
        deployment: str,
        placed: Iterable[PlacedProcess],
        *,
        whole: bool = False,
        at: datetime | None = None,
    ) -> None:
        """Each of `placed` as where its process now is (placed `at`, default now). `whole`:
        these are all of the deployment's processes, so any other row of it goes. A
        deployment deleted meanwhile keeps nothing."""
        placed = list(placed)
        at = at or utcnow()
        with Session(self.engine) as s:
            try:
                self._write(s, deployment, placed, whole, at)
                s.commit()
            except sa.exc.IntegrityError:  # the deployment is gone: its placement with it
                s.rollback()

    @staticmethod
    def _write(
        s: Session, deployment: str, placed: list[PlacedProcess], whole: bool, at: datetime
    ) -> None:
        if whole:
            s.exec(
                sa.delete(Placement).where(
                    col(Placement.deployment) == deployment,
                    col(Placement.process).not_in([p.process for p in placed]),
                )
            )
        for p in placed:
            where = {
                "node_id": p.node_id,
                "node_address": p.node_address,
                "gpus": p.gpus,
                "placed_at": at,
            }
            s.exec(
                insert(Placement)
                .values(deployment=deployment, process=p.process, **where)
                .on_conflict_do_update(index_elements=["deployment", "process"], set_=where)
            )

    def of(self, deployment: str) -> list[Placement]:
        """The deployment's processes, proxy first, then by name."""
        with Session(self.engine) as s:
            rows = list(s.exec(select(Placement).where(Placement.deployment == deployment)))
        return sorted(rows, key=lambda r: (r.process != "proxy", r.process))
