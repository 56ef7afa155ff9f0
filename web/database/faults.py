"""What the storage under the control plane refusing a write becomes: a full disk (SQLite's
"database or disk is full", ENOSPC, a quota) a 507 saying so, a database SQLite finds
damaged a 503 naming it; either instead of a bare 500 "Internal Server Error" (issue 39)."""

from __future__ import annotations

import errno
import logging
import sqlite3

import sqlalchemy as sa

from domain.errors import PdctlError, Unavailable

log = logging.getLogger("pdctl.storage")
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class StorageFull(PdctlError):
    status = 507
    title = "Insufficient storage"


class DatabaseUnusable(Unavailable):
    title = "Database unusable"


def classify(exc: BaseException) -> PdctlError | None:
    """The error to answer for `exc`, if it is the storage's; None for anything else."""
    cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    if isinstance(cause, OSError) and cause.errno in FULL_ERRNOS:
        return StorageFull(f"the disk is full: nothing was written ({cause.strerror})")
    if isinstance(cause, sqlite3.OperationalError) and "full" in str(cause):
        return StorageFull(
            "the database's disk is full: nothing was written; free space and try again"
        )
    if isinstance(cause, sqlite3.DatabaseError) and (
        "malformed" in str(cause) or "not a database" in str(cause)
    ):
        return DatabaseUnusable(f"the database is damaged ({cause}); restore it from a backup")
    return None
