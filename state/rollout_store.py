"""Rollouts in SQLite (`rollouts`), kept whole as the engine (controller/rollout/) gives them,
and how long each instance group took to start (`start_samples`), what a forecast is made of.

A rollout is active while its state is one of ACTIVE; at most one per deployment is, and
while one is, the deployment is held: any other change is `ChangeInProgress` naming it
(state/changes.py). These writes publish no event: the engine records its own.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Protocol

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from state.errors import ChangeInProgress, NotFound
from state.models import Rollout, StartSample, utcnow

ACTIVE = ("running", "aborting", "rolling_back")
REQUIRED = ("revision", "kind", "strategy", "state", "actor")
KEPT_SAMPLES = 200  # per deployment and group: enough for a forecast, bounded on disk


class RolloutCore(Protocol):
    """What Rollouts uses of the Store it is mixed into (mypy's protocol self-type)."""

    engine: sa.Engine
    _write: threading.Lock


class Rollouts:
    """The store's rollouts and start samples."""

    def new_rollout(self: RolloutCore, name: str, body: dict) -> int:
        """Store `body` (revision, kind, strategy, state, actor at least) as a new rollout of
        deployment `name`; its id, also written into the stored body as "id". An active one
        while another rollout of `name` is active is ChangeInProgress."""
        columns = _columns(body)
        with self._write, Session(self.engine) as s:
            if body["state"] in ACTIVE:
                _refuse_another(s, name, None)
            now = utcnow()
            added = sa.insert(Rollout).values(
                deployment=name,
                created_at=now,
                updated_at=now,
                ended_at=None if body["state"] in ACTIVE else now,
                body=body,
                **columns,
            )
            rollout_id: int = s.execute(added.returning(col(Rollout.id))).scalar_one()
            s.execute(  # the body carries its id too
                sa.update(Rollout)
                .where(col(Rollout.id) == rollout_id)
                .values(body={**body, "id": rollout_id})
            )
            s.commit()
            return rollout_id

    def save_rollout(self: RolloutCore, rollout_id: int, body: dict) -> None:
        """Replace the rollout's body and the columns it drives. It ends (ended_at) the
        first time its state is not one of ACTIVE; made active again, it has not ended."""
        columns = _columns(body)
        with self._write, Session(self.engine) as s:
            row = s.get(Rollout, rollout_id)
            if row is None:
                raise NotFound(f"no rollout {rollout_id}")
            if body["state"] in ACTIVE:
                _refuse_another(s, row.deployment, rollout_id)
                row.ended_at = None
            elif row.ended_at is None:
                row.ended_at = utcnow()
            for key, value in columns.items():
                setattr(row, key, value)
            row.body = {**body, "id": rollout_id}
            row.updated_at = utcnow()
            s.add(row)
            s.commit()

    def rollout(self: RolloutCore, name: str, rollout_id: int) -> dict | None:
        """The rollout of deployment `name` with that id, or None."""
        with Session(self.engine) as s:
            row = s.get(Rollout, rollout_id)
            return row.body if row is not None and row.deployment == name else None

    def rollouts(self: RolloutCore, name: str, limit: int = 50) -> list[dict]:
        """The deployment's rollouts, newest first."""
        query = (
            select(Rollout)
            .where(Rollout.deployment == name)
            .order_by(col(Rollout.id).desc())
            .limit(limit)
        )
        with Session(self.engine) as s:
            return [row.body for row in s.exec(query)]

    def active_rollout(self: RolloutCore, name: str) -> dict | None:
        """The deployment's active rollout (the newest, should there be more), or None."""
        with Session(self.engine) as s:
            row = active(s, name)
            return row.body if row is not None else None

    def unfinished(self: RolloutCore) -> list[dict]:
        """Every active rollout of any deployment, oldest first: what a control plane that
        restarted finds left to resume or end."""
        query = select(Rollout).where(col(Rollout.state).in_(ACTIVE)).order_by(col(Rollout.id))
        with Session(self.engine) as s:
            return [row.body for row in s.exec(query)]

    # -- start samples ------------------------------------------------------------------

    def add_start_samples(self: RolloutCore, name: str, group: str, seconds: list[float]) -> None:
        """Keep how long each of `group`'s processes took to start; only the latest
        KEPT_SAMPLES of the deployment's group stay."""
        bad = [s for s in seconds if not math.isfinite(s) or s < 0]
        if bad:
            raise ValueError(f"a start takes a finite number of seconds, not {bad[0]!r}")
        if not seconds:
            return
        with self._write, Session(self.engine) as s:
            now = utcnow()
            s.add_all(StartSample(deployment=name, grp=group, seconds=v, ts=now) for v in seconds)
            s.flush()
            kept = (
                select(StartSample.id)
                .where(StartSample.deployment == name, StartSample.grp == group)
                .order_by(col(StartSample.id).desc())
                .limit(KEPT_SAMPLES)
            )
            s.exec(
                sa.delete(StartSample).where(
                    col(StartSample.deployment) == name,
                    col(StartSample.grp) == group,
                    col(StartSample.id).not_in(kept.scalar_subquery()),
                )
            )
            s.commit()

    def start_samples(self: RolloutCore, name: str, per_group: int = 20) -> dict[str, list[float]]:
        """The latest `per_group` start times of each of the deployment's groups, oldest
        first."""
        if per_group < 1:
            raise ValueError(f"per_group is at least 1, not {per_group}")
        newest = (
            func.row_number()
            .over(partition_by=StartSample.grp, order_by=col(StartSample.id).desc())
            .label("newest")
        )
        ranked = (
            select(StartSample.id, StartSample.grp, StartSample.seconds, newest)
            .where(StartSample.deployment == name)
            .subquery()
        )
        query = (
            sa.select(ranked.c.grp, ranked.c.seconds)
            .where(ranked.c.newest <= per_group)
            .order_by(ranked.c.grp, ranked.c.id)
        )
        found: dict[str, list[float]] = {}
        with Session(self.engine) as s:
            for grp, seconds in s.execute(query):
                found.setdefault(grp, []).append(seconds)
        return found


def active(s: Session, name: str) -> Rollout | None:
    """The deployment's newest active rollout, inside a session of the store."""
    return s.exec(
        select(Rollout)
        .where(Rollout.deployment == name, col(Rollout.state).in_(ACTIVE))
        .order_by(col(Rollout.id).desc())
    ).first()


def forget(s: Session, name: str) -> None:
    """The deployment's rollouts and start samples, gone with it (inside Store.delete)."""
    s.exec(sa.delete(Rollout).where(col(Rollout.deployment) == name))
    s.exec(sa.delete(StartSample).where(col(StartSample.deployment) == name))


def _refuse_another(s: Session, name: str, rollout_id: int | None) -> None:
    held = active(s, name)
    if held is not None and held.id != rollout_id:
        raise ChangeInProgress(name, held.revision, held.body.get("reason"), held.body)


def _columns(body: dict) -> dict[str, Any]:
    missing = [key for key in REQUIRED if body.get(key) is None]
    if missing:
        raise ValueError(f"a rollout's record needs {', '.join(missing)}")
    if not isinstance(body["revision"], int):
        raise ValueError(f"a rollout's revision is a number, not {body['revision']!r}")
    return {key: body[key] for key in REQUIRED}
