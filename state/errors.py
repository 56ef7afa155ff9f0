"""The errors the store raises, leaves of pdctl's error tree (domain/errors.py documents the
whole tree; web/errors.py renders it). Each carries its HTTP status and a title."""

from __future__ import annotations

from domain.errors import Conflict, NotFound, PdctlError

__all__ = ["ChangeInProgress", "Conflict", "NotFound", "PdctlError", "StaleRevision", "Unreadable"]


class Unreadable(Conflict):
    title = "Stored revision cannot be read"

    def __init__(self, name: str, revision: int, field: str, why: str) -> None:
        super().__init__(
            f"deployment {name!r} revision {revision} as stored cannot be read ({field}: "
            f"{why}); replace it (PUT /api/deployments/{name} or the edit form) or delete it"
        )
        self.name, self.revision = name, revision


class StaleRevision(Conflict):
    title = "Edited from an old revision"

    def __init__(self, message: str, current: int) -> None:
        super().__init__(message)
        self.current = current

    def headers(self) -> dict[str, str]:
        return {"ETag": f'"{self.current}"'}


class ChangeInProgress(Conflict):
    """Another writer while a change (a mode switch) has a revision in progress."""

    title = "A change is in progress"

    def __init__(self, name: str, revision: int, reason: str | None = None) -> None:
        super().__init__(
            f"deployment {name!r} has revision {revision} in progress"
            + (f" ({reason})" if reason else "")
            + ": nothing else can change it until that change is applied, failed or rolled back"
        )
        self.name, self.revision = name, revision
