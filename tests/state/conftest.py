"""Fixtures of the state tests: a SQLite file migrated to head once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from state import migrate


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("template") / "pdctl.db"
    migrate.upgrade(db)
    return db
