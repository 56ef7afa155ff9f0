"""0006: rollouts and start_samples added to a file with data; rollout ids never given twice;
down to 0005 drops only those two tables, and up again gives them back empty."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from state import migrate
from state.db import create_engine


def _rollout(conn: sa.Connection, deployment: str) -> int:
    conn.exec_driver_sql(
        "INSERT INTO rollouts (deployment, revision, kind, strategy, state, actor, created_at, "
        f"updated_at, body) VALUES ('{deployment}', 1, 'restart', 'roll', 'running', 'x', "
        "'2026-01-01', '2026-01-01', '{}')"
    )
    return conn.exec_driver_sql("SELECT max(id) FROM rollouts").scalar()


def _objects(conn: sa.Connection) -> set[str]:
    return {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master")}


def test_0006_adds_rollouts_and_start_samples_and_goes_back(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db, "0005")
    engine = create_engine(db)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO deployments (name, revision, created_at, updated_at) "
                "VALUES ('a', 1, '2026-01-01', '2026-01-01')"
            )
        migrate.upgrade(db, "0006")
        with engine.begin() as conn:
            assert {
                "rollouts",
                "start_samples",
                "ix_rollouts_deployment_id",
                "ix_rollouts_state",
                "ix_start_samples_deployment_grp_id",
            } <= _objects(conn)
            first = _rollout(conn, "a")
            newest = _rollout(conn, "gone")  # a name, not a key: any name is kept
            conn.exec_driver_sql(f"DELETE FROM rollouts WHERE id = {newest}")
            assert _rollout(conn, "a") == newest + 1 > first  # AUTOINCREMENT: never reused
            conn.exec_driver_sql(
                "INSERT INTO start_samples (deployment, grp, seconds, ts) "
                "VALUES ('a', 'prefill', 31.5, '2026-01-01')"
            )

        migrate.downgrade(db, "0005")
        with engine.connect() as conn:
            left = _objects(conn)
            assert not {"rollouts", "start_samples"} & left
            assert "placements" in left
            assert conn.exec_driver_sql("SELECT name FROM deployments").scalar() == "a"
        migrate.upgrade(db)  # and up again, empty
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM rollouts").scalar() == 0
            assert conn.exec_driver_sql("SELECT count(*) FROM start_samples").scalar() == 0
    finally:
        engine.dispose()
