"""One `pdctl serve` per database: an exclusive flock on `DB.lock`, held for the process's
life (the kernel lets go when it ends, however it ends). Two control planes on one file would
hand the same ports to two deployments and adopt each other's instances."""

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


def hold(db: Path) -> IO[str]:
    """The lock on `db`, kept while the returned file stays open; DatabaseInUse if taken."""
    path = lock_path(Path(db))
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    lock = os.fdopen(fd, "r+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock.read().strip()
        lock.close()
        raise DatabaseInUse(Path(db), holder) from None
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    return lock
