"""One `pdctl serve` per database: an exclusive flock on `DB.lock` beside the database's real
path (symlinks resolved), and one on the database file itself (so a hard link, or any other
path to the same file, finds it taken too), held for the process's life (the kernel lets go
when it ends, however it ends). Two control planes on one file would hand the same ports to
two deployments and adopt each other's instances; a symlink to the database once let a
second one start (issue 39)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO


class DatabaseInUse(Exception):
    def __init__(self, db: Path, holder: str) -> None:
        who = f"pid {holder}" if holder else "another process"
        super().__init__(
            f"--db {db} is in use by another pdctl serve ({who}): one control plane per "
            "database; stop that one or give this one its own --db"
        )


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


class Held:
    """Both locks; `close` lets go of them (the process's end does as well)."""

    def __init__(self, lock: IO[str], database: int) -> None:
        self.lock, self.database = lock, database

    def close(self) -> None:
        self.lock.close()
        os.close(self.database)  # after the app's engine is gone: it ends fcntl locks too


def hold(db: Path) -> Held:
    """The locks on `db`, kept until `close`; DatabaseInUse if either is taken."""
    real = Path(db).resolve()
    fd = os.open(lock_path(real), os.O_CREAT | os.O_RDWR, 0o600)
    lock = os.fdopen(fd, "r+")
    # The database itself, whatever path reached it (flock leaves SQLite's fcntl locks be).
    database = os.open(real, os.O_CREAT | os.O_RDONLY, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(database, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock.read().strip()
        lock.close()
        os.close(database)
        raise DatabaseInUse(Path(db), holder) from None
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    return Held(lock, database)
