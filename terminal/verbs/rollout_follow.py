"""Following one rollout until it ends, as `kubectl rollout status` does: each step of it (and
of the rollback it began) printed to stderr as it moves, bounded by --timeout, riding out a
restart of the server (terminal/reconnect.py; the rollout goes on in the one that comes back).
Shared by `pdctl rollout status|abort|undo`, `apply --wait` and `restart`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import typer

from terminal import exits
from terminal import rollout_views as views
from terminal.client import ApiClient
from terminal.polling import TimedOut, poll
from terminal.reconnect import Reconnect
from terminal.session import fail
from terminal.verbs.read import path

Json = dict[str, Any]


@dataclass(frozen=True)
class Ended:
    """A followed rollout as it ended, and the rollback it began (if it began one)."""

    rollout: Json
    rollback: Json | None

    @property
    def done(self) -> bool:
        return self.rollout["state"] == "done"

    @property
    def rolled_back(self) -> bool:
        """Stopped and put back: no rollback was due, or the one it began is done."""
        return self.rollback is None or self.rollback["state"] == "done"

    def outcome(self) -> str:
        return views.outcome(self.rollout, self.rollback)


def rollout_of(api: ApiClient, name: str, rollout_id: str) -> Json:
    return api.get(path(name, f"/rollouts/{rollout_id}"))


def follow(api: ApiClient, verb: str, rec: Json, timeout: float) -> Ended:
    """Ask until `rec` (and its rollback) ended, printing each step that moved; exit 1
    naming where it is after `timeout` seconds (it goes on in the server)."""
    name = rec["deployment"]
    seen: views.Seen = {}
    for line in views.progress(seen, rec):
        typer.echo(f"  {line}", err=True)

    def ask() -> tuple[Json, Json | None, Json | None]:
        shown = api.get(path(name, "/rollout"))["rollout"]
        now = shown if shown is not None and shown["id"] == rec["id"] else None
        now = now or rollout_of(api, name, rec["id"])
        back = _rollback(api, now, shown)
        for line in views.progress(seen, now) + views.progress(seen, back):
            typer.echo(f"  {line}", err=True)
        return now, back, shown

    retry = Reconnect(verb, time.monotonic() + timeout)
    try:
        ended = poll(retry.asking(ask), lambda last: last is not None and _ended(last), timeout)
    except KeyboardInterrupt:
        fail(
            verb,
            f"interrupted: rollout {rec['id']} goes on in the server "
            f"(`pdctl rollout abort {name}` ends it)",
            exits.INTERRUPTED,
        )
    except TimedOut as out:
        at = "an unknown step (the server did not answer)"
        if out.last is not None:
            last, back, _ = out.last
            at = views.where(back if back is not None and back["state"] == "running" else last)
        fail(
            verb,
            f"rollout {rec['id']} still running after --timeout {timeout:g} s at {at} (it "
            f"goes on: `pdctl rollout status {name}` follows it, `pdctl rollout abort {name}` "
            "ends it)",
            exits.FAILED,
        )
    now, back, _ = ended or (rec, None, None)  # never None: `done` accepts no None
    if back is not None and back["state"] == "running":  # ended since the last look
        back = rollout_of(api, name, back["id"])
    return Ended(now, back)


def _ended(last: tuple[Json, Json | None, Json | None]) -> bool:
    return not views.ongoing(last[0], last[2])


def _rollback(api: ApiClient, rec: Json, shown: Json | None) -> Json | None:
    """The rollback `rec` began, if it began one."""
    back_id = rec.get("rolled_back_by")
    if back_id is None:
        return None
    if shown is not None and shown["id"] == back_id:
        return shown
    return rollout_of(api, rec["deployment"], back_id)
