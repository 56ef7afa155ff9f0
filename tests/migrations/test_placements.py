"""0005: placements, one row per deployment and process, gone with its deployment; down to
0004 drops only that table."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from state import migrate
from state.db import create_engine


def _deployment(conn: sa.Connection, name: str) -> None:
    conn.exec_driver_sql(
        "INSERT INTO deployments (name, revision, created_at, updated_at) "
        f"VALUES ('{name}', 1, '2026-01-01', '2026-01-01')"
    )


def _placement(conn: sa.Connection, deployment: str, process: str) -> None:
    conn.exec_driver_sql(
        "INSERT INTO placements (deployment, process, node_id, node_address, gpus, placed_at) "
        f"VALUES ('{deployment}', '{process}', 'abc', '127.0.0.2', 1.0, '2026-01-01')"
    )


def test_0005_adds_placements_to_a_file_with_data_and_goes_back(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db, "0004")
    engine = create_engine(db)  # foreign keys on, as the app runs
    try:
        with engine.begin() as conn:
            _deployment(conn, "a")
            _deployment(conn, "b")
        migrate.upgrade(db, "0005")
        with engine.begin() as conn:
            _placement(conn, "a", "proxy")
            _placement(conn, "a", "decode-0")
            _placement(conn, "b", "proxy")
        with engine.begin() as conn, pytest.raises(sa.exc.IntegrityError, match="UNIQUE"):
            _placement(conn, "a", "proxy")
        with engine.begin() as conn, pytest.raises(sa.exc.IntegrityError, match="FOREIGN KEY"):
            _placement(conn, "gone", "proxy")
        with engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM deployments WHERE name = 'a'")
            left = conn.exec_driver_sql("SELECT deployment, process FROM placements").all()
        assert left == [("b", "proxy")]  # a's went with it

        migrate.downgrade(db, "0004")
        with engine.connect() as conn:
            names = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master")}
            assert "placements" not in names
            assert conn.exec_driver_sql("SELECT name FROM deployments").scalar() == "b"
        migrate.upgrade(db)  # and up again, empty
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM placements").scalar() == 0
    finally:
        engine.dispose()
