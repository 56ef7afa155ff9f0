"""How the controller's actions reach the event store, and how an operator's reason reads in
an event's message."""

from __future__ import annotations

from collections.abc import Callable

# (actor, kind, message, deployment, detail) -> None: how events reach the store.
Recorder = Callable[[str, str, str, str | None, dict | None], object]  # Store.record


def reason_suffix(reason: str | None) -> str:
    """' (why)' after an event's message, or nothing when no reason was given."""
    return f" ({reason})" if reason else ""
