"""The SQLite engine: WAL journal, foreign keys on, a busy timeout; one per app, in its lifespan."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa


def create_engine(path: Path) -> sa.Engine:
    engine = sa.create_engine(
        f"sqlite:///{path}", connect_args={"check_same_thread": False, "timeout": 10}
    )

    @sa.event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: object, _record: object) -> None:
        cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return engine
