"""The SQLite tables (SQLModel). Alembic migrations in migrations/ are the only way they change.

deployments  one row per live deployment; `revision` is the number of its current revision
revisions    every change to a deployment: the whole spec and its allocated ports, who, why,
             and its state (state/changes.py)
events       everything an operator (or the controller) does; outlives deleted deployments
history      observe/'s downsampled live frames
bench_runs   `pdctl bench` runs started from the dashboard, with the revision they measured
placements   the node each process of a deployment was last placed on (state/placement_store.py)
rollouts     every rollout of a running deployment, the engine's whole record as JSON; outlives
             restarts, goes with its deployment (state/rollout_store.py)
start_samples  how long an instance group's processes took to start, the latest 200 per group
             (state/rollout_store.py)
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel


class UTCDateTime(sa.types.TypeDecorator):
    """A DATETIME stored as naive UTC (SQLite keeps no zone) and read back as aware UTC."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None else None


def utcnow() -> datetime:
    return datetime.now(UTC)


def _ts(**kw: Any) -> Any:  # Any: what Field returns, so `created_at: datetime = _ts()`
    return Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False, **kw)


class Deployment(SQLModel, table=True):
    __tablename__ = "deployments"
    __table_args__ = (sa.UniqueConstraint("name", name="uq_deployments_name"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=40, nullable=False)
    revision: int = Field(nullable=False)
    created_at: datetime = _ts()
    updated_at: datetime = _ts()


class Revision(SQLModel, table=True):
    __tablename__ = "revisions"
    __table_args__ = (
        sa.UniqueConstraint("deployment_id", "number", name="uq_revisions_deployment_number"),
        sa.Index("ix_revisions_deployment_state", "deployment_id", "state"),
    )

    id: int | None = Field(default=None, primary_key=True)
    deployment_id: int = Field(
        sa_column=sa.Column(
            sa.Integer,
            sa.ForeignKey("deployments.id", ondelete="CASCADE", name="fk_revisions_deployment_id"),
            nullable=False,
        )
    )
    number: int = Field(nullable=False)
    spec: dict = Field(sa_type=sa.JSON, nullable=False)
    ports: dict = Field(sa_type=sa.JSON, nullable=False)
    actor: str = Field(max_length=200, nullable=False)
    reason: str | None = Field(default=None, max_length=500)
    created_at: datetime = _ts()
    # state/changes.py RevisionState: pending | in_progress | applied | failed | rolled_back
    state: str = Field(
        default="applied",
        max_length=16,
        sa_column_kwargs={"server_default": "applied", "nullable": False},
    )


class Event(SQLModel, table=True):
    __tablename__ = "events"
    __table_args__ = (
        sa.Index("ix_events_deployment_id", "deployment", "id"),
        sa.Index("ix_events_kind", "kind"),
    )

    id: int | None = Field(default=None, primary_key=True)
    ts: datetime = _ts()
    actor: str = Field(max_length=200, nullable=False)
    kind: str = Field(max_length=64, nullable=False)
    deployment: str | None = Field(default=None, max_length=40)  # a name, not a key: outlives it
    message: str = Field(nullable=False)
    detail: dict = Field(default_factory=dict, sa_type=sa.JSON, nullable=False)


class HistoryPoint(SQLModel, table=True):
    """observe/'s downsampled history: one row per deployment per few seconds, the frame's
    headline numbers as JSON (observe/build.py `point`), so charts survive a restart."""

    __tablename__ = "history"
    __table_args__ = (
        sa.Index("ix_history_deployment_ts", "deployment", "ts"),
        sa.Index("ix_history_ts", "ts"),
    )

    id: int | None = Field(default=None, primary_key=True)
    deployment: str = Field(max_length=40, nullable=False)
    ts: float = Field(nullable=False)  # epoch seconds of the frame
    data: dict = Field(sa_type=sa.JSON, nullable=False)


class BenchRun(SQLModel, table=True):
    """One `pdctl bench` run (a rate or a sweep) against a deployment's proxy: the revision and
    topology it measured, its settings, its progress, and the bench's result document."""

    __tablename__ = "bench_runs"
    __table_args__ = (sa.Index("ix_bench_runs_deployment_id", "deployment", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    deployment: str = Field(max_length=40, nullable=False)  # a name, not a key: outlives it
    revision: int = Field(nullable=False)
    topology: dict = Field(sa_type=sa.JSON, nullable=False)  # state/bench_store.py `snapshot`
    config: dict = Field(sa_type=sa.JSON, nullable=False)  # rates, prompts, lengths, SLOs
    status: str = Field(max_length=16, nullable=False)  # running | done | failed | stopped
    actor: str = Field(max_length=200, nullable=False)
    started_at: datetime = _ts()
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    done: int = Field(default=0, nullable=False)  # requests finished, over every rate
    total: int = Field(nullable=False)
    result: dict | None = Field(default=None, sa_type=sa.JSON)  # bench/report.py's document
    error: str | None = Field(default=None)


class Placement(SQLModel, table=True):
    """Where one process of a deployment was last placed: written when the deployment starts
    and when the process is replaced on another node (its node died); gone with the deployment."""

    __tablename__ = "placements"
    __table_args__ = (
        sa.UniqueConstraint("deployment", "process", name="uq_placements_deployment_process"),
    )

    id: int | None = Field(default=None, primary_key=True)
    deployment: str = Field(
        sa_column=sa.Column(
            sa.String(length=40),
            sa.ForeignKey("deployments.name", ondelete="CASCADE", name="fk_placements_deployment"),
            nullable=False,
        )
    )
    process: str = Field(max_length=80, nullable=False)  # an instance name, or "proxy"
    node_id: str = Field(max_length=128, nullable=False)
    node_address: str = Field(max_length=255, nullable=False)
    gpus: float = Field(nullable=False)  # what it was given there (0: none, the stand-in)
    placed_at: datetime = _ts()


class Rollout(SQLModel, table=True):
    """One rollout (controller/rollout/): a change to a running deployment that ends, can be
    aborted and undone. `body` is the engine's whole record; the columns repeat the fields
    the store queries by. A name, not a key: Store.delete removes a deployment's rows."""

    __tablename__ = "rollouts"
    __table_args__ = (
        sa.Index("ix_rollouts_deployment_id", "deployment", "id"),
        sa.Index("ix_rollouts_state", "state"),
        {"sqlite_autoincrement": True},  # an id is never given twice, even after a delete
    )

    id: int | None = Field(default=None, primary_key=True)
    deployment: str = Field(max_length=40, nullable=False)
    revision: int = Field(nullable=False)
    kind: str = Field(max_length=16, nullable=False)
    strategy: str = Field(max_length=16, nullable=False)
    state: str = Field(max_length=16, nullable=False)  # state/rollout_store.py ACTIVE, or ended
    actor: str = Field(max_length=200, nullable=False)
    created_at: datetime = _ts()
    updated_at: datetime = _ts()
    ended_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    body: dict = Field(sa_type=sa.JSON, nullable=False)


class StartSample(SQLModel, table=True):
    """How long one process of an instance group took to start, what a rollout's forecast of
    its steps is made from."""

    __tablename__ = "start_samples"
    __table_args__ = (sa.Index("ix_start_samples_deployment_grp_id", "deployment", "grp", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    deployment: str = Field(max_length=40, nullable=False)
    grp: str = Field(max_length=80, nullable=False)  # an instance group's name
    seconds: float = Field(nullable=False)
    ts: datetime = _ts()


class Calibration(SQLModel, table=True):
    """A deployment's calibrated profile (`pdctl calibrate`): the step costs measured on it,
    which the planner, the advisor's forecasts and the autopilot's capacity use instead of
    the datasheet. One per deployment, the latest; `body` is the profile's JSON."""

    __tablename__ = "calibrations"

    deployment: str = Field(max_length=40, primary_key=True)  # a name, as bench_runs keep it
    actor: str = Field(max_length=200, nullable=False)
    created_at: datetime = _ts()
    body: dict = Field(sa_type=sa.JSON, nullable=False)
