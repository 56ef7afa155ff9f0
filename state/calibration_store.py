"""Calibrated profiles in SQLite (`calibrations`): one per deployment, the latest kept."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from state.models import Calibration, utcnow


class CalibrationStore:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def put(self, deployment: str, body: dict[str, Any], actor: str) -> Calibration:
        """Keep `body` as the deployment's profile, replacing the one before."""
        with Session(self.engine, expire_on_commit=False) as session:
            row = session.get(Calibration, deployment)
            if row is None:
                row = Calibration(deployment=deployment, actor=actor, body=body)
            else:
                row.actor, row.body, row.created_at = actor, body, utcnow()
            session.add(row)
            session.commit()
            return row

    def get(self, deployment: str) -> Calibration | None:
        with Session(self.engine, expire_on_commit=False) as session:
            return session.get(Calibration, deployment)

    def names(self) -> list[str]:
        """The deployments that have a kept profile, by name."""
        with Session(self.engine) as session:
            rows = session.exec(sa.select(Calibration.deployment)).all()  # type: ignore[call-overload]
            return sorted(str(r[0]) for r in rows)
