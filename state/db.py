"""The SQLite engine: WAL journal, foreign keys on, a busy timeout; one per app, in its lifespan.

The file holds env secrets, so it is the control plane user's alone: created 0600 before
SQLite opens it (SQLite gives its -wal and -shm files the database's own mode), an older
one narrowed to that.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import sqlalchemy as sa

FILE_MODE = 0o600
SIDE_FILES = ("-wal", "-shm", "-journal")


def make_private(path: Path) -> None:
    """`path` (created empty if missing) and its side files narrowed to 0600."""
    path = Path(path)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, FILE_MODE))
    for file in (path, *(path.with_name(path.name + s) for s in SIDE_FILES)):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(file, FILE_MODE)


def create_engine(path: Path) -> sa.Engine:
    make_private(path)
    engine = sa.create_engine(
        f"sqlite:///{path}", connect_args={"check_same_thread": False, "timeout": 10}
    )

    @sa.event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return engine
