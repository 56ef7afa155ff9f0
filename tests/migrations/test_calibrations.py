"""0007: calibrations added to a file with data, one per deployment and replaced by the store;
down to 0006 drops only that table."""

from __future__ import annotations

from pathlib import Path

from state import migrate
from state.calibration_store import CalibrationStore
from state.db import create_engine


def test_0007_adds_calibrations_the_store_keeps_the_latest_and_goes_back(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db, "0006")
    engine = create_engine(db)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO deployments (name, revision, created_at, updated_at) "
                "VALUES ('a', 1, '2026-01-01', '2026-01-01')"
            )
        migrate.upgrade(db, "0007")
        store = CalibrationStore(engine)
        assert store.get("a") is None
        store.put("a", {"tp": 1}, "alice")
        store.put("a", {"tp": 2}, "bob")
        kept = store.get("a")
        assert kept is not None and kept.body == {"tp": 2} and kept.actor == "bob"
        migrate.downgrade(db, "0006")
        with engine.connect() as conn:
            names = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master")}
            assert "calibrations" not in names and "rollouts" in names
            assert conn.exec_driver_sql("SELECT name FROM deployments").scalar() == "a"
    finally:
        engine.dispose()
