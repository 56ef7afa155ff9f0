"""Alembic is the only schema path: from an empty file to head, down and up, and the ORM
metadata agrees with the migrated schema."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlmodel import SQLModel

import state.models  # noqa: F401  (the tables)
from state import migrate
from state.db import create_engine

TABLES = {
    "alembic_version",
    "deployments",
    "revisions",
    "events",
    "history",
    "bench_runs",
    "placements",
    "rollouts",
    "start_samples",
    "calibrations",
}


def tables(db: Path) -> set[str]:
    engine = sa.create_engine(f"sqlite:///{db}")
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def head() -> str:
    return ScriptDirectory.from_config(migrate.alembic_config(Path("x.db"))).get_current_head()


def current(db: Path) -> str | None:
    engine = sa.create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def test_an_empty_file_migrates_to_head(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    db.touch()
    migrate.upgrade(db)
    assert tables(db) == TABLES
    assert current(db) == head()


def test_down_to_base_and_up_again(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db)
    migrate.downgrade(db, "base")
    assert tables(db) == {"alembic_version"}
    assert current(db) is None
    migrate.upgrade(db)
    assert tables(db) == TABLES
    migrate.upgrade(db)  # at head already: nothing to do
    assert current(db) == head()


def test_orm_metadata_matches_the_migrated_schema(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db)
    engine = sa.create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True}
            )
            assert compare_metadata(context, SQLModel.metadata) == []
    finally:
        engine.dispose()


def test_the_app_engine_runs_wal_with_foreign_keys(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db)
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            conn.exec_driver_sql(
                "INSERT INTO deployments (name, revision, created_at, "
                "updated_at) VALUES ('a', 1, '2026-01-01', '2026-01-01')"
            )
            id_ = conn.exec_driver_sql("SELECT id FROM deployments").scalar()
            conn.exec_driver_sql(
                "INSERT INTO revisions (deployment_id, number, spec, ports, "
                f"actor, created_at) VALUES ({id_}, 1, '{{}}', '{{}}', 'x', "
                "'2026-01-01')"
            )
            conn.exec_driver_sql("DELETE FROM deployments")
            assert conn.exec_driver_sql("SELECT count(*) FROM revisions").scalar() == 0
            with pytest.raises(sa.exc.IntegrityError, match="FOREIGN KEY"):
                conn.exec_driver_sql(
                    "INSERT INTO revisions (deployment_id, number, spec, "
                    "ports, actor, created_at) VALUES (999, 1, '{}', '{}', "
                    "'x', '2026-01-01')"
                )
    finally:
        engine.dispose()


def test_0003_adds_bench_runs_to_a_file_with_data(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db, "0002")
    engine = sa.create_engine(f"sqlite:///{db}")
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO deployments (name, revision, created_at, "
                "updated_at) VALUES ('a', 1, '2026-01-01', '2026-01-01')"
            )
            conn.exec_driver_sql(
                "INSERT INTO history (deployment, ts, data) VALUES ('a', 1.0, '{}')"
            )
        migrate.upgrade(db)
        assert current(db) == head() and "bench_runs" in tables(db)
        with engine.begin() as conn:
            assert conn.exec_driver_sql("SELECT name FROM deployments").scalar() == "a"
            assert conn.exec_driver_sql("SELECT count(*) FROM history").scalar() == 1
            conn.exec_driver_sql(
                "INSERT INTO bench_runs (deployment, revision, topology, config, status, "
                "actor, started_at, done, total) VALUES ('a', 1, '{}', '{}', 'running', 'x', "
                "'2026-01-01', 0, 20)"
            )
        migrate.downgrade(db, "0002")
        assert "bench_runs" not in tables(db)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM deployments").scalar() == 1
    finally:
        engine.dispose()
