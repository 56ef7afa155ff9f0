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


class DatabaseDamaged(Exception):
    """The database file cannot be used: not SQLite, or its pages fail SQLite's own check."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(
            f"--db {path} is damaged ({why}): restore it from a backup, or move it away "
            "to start with an empty one"
        )


def check_intact(path: Path) -> None:
    """DatabaseDamaged unless `path` is a SQLite database whose pages SQLite finds sound
    (`PRAGMA quick_check`): at open, so a damaged file is one line naming it, not a
    traceback from the migrations or a 500 on the first request that reads a bad page."""
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as db:
            found = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
    except sqlite3.DatabaseError as exc:  # "file is not a database", "malformed", ...
        raise DatabaseDamaged(path, " ".join(str(exc).split())) from None
    if found != ["ok"]:
        raise DatabaseDamaged(path, " ".join("; ".join(found).split())[:300])


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
