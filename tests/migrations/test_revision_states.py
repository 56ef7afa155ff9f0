"""0004: revisions get a state; every revision stored before it is applied."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from state import migrate


def test_0004_marks_every_stored_revision_applied_and_goes_back(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db, "0003")
    engine = sa.create_engine(f"sqlite:///{db}")
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO deployments (id, name, revision, created_at, updated_at) "
                "VALUES (1, 'a', 2, '2026-01-01', '2026-01-01')"
            )
            for number in (1, 2):
                conn.exec_driver_sql(
                    "INSERT INTO revisions (deployment_id, number, spec, ports, actor, "
                    f"created_at) VALUES (1, {number}, '{{}}', '{{}}', 'x', '2026-01-01')"
                )
        migrate.upgrade(db)
        with engine.connect() as conn:
            states = conn.exec_driver_sql("SELECT state FROM revisions ORDER BY number").all()
        assert [s for (s,) in states] == ["applied", "applied"]
        migrate.downgrade(db, "0003")
        with engine.connect() as conn:
            columns = [c[1] for c in conn.exec_driver_sql("PRAGMA table_info(revisions)")]
            assert "state" not in columns
            assert conn.exec_driver_sql("SELECT count(*) FROM revisions").scalar() == 2
    finally:
        engine.dispose()
