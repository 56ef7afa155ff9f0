"""`pdctl events NAME [--follow]` and `pdctl logs NAME INSTANCE [--follow]`: the audit trail
and a process's output; following ends at --timeout or Ctrl-C (exit 0 either way), and rides
out a restart of the server as `pdctl top` does (terminal/reconnect.py)."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from terminal import log_tail, views
from terminal.event_stream import follow
from terminal.polling import TimedOut, poll
from terminal.reconnect import Reconnect
from terminal.session import JsonOption, ServerOption, client, show_json
from terminal.verbs.read import Name, path

FollowOption = Annotated[bool, typer.Option("--follow", "-f", help="Keep printing as they come.")]
ForOption = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        help="With --follow: stop after this many seconds (default: until Ctrl-C).",
        min=0.1,
        show_default=False,
    ),
]
LOG_POLL_S = 1.0


def events(
    name: Name,
    follow_: FollowOption = False,
    kind: Annotated[
        str | None, typer.Option(help="Only this kind, e.g. switch.done.", show_default=False)
    ] = None,
    limit: Annotated[int, typer.Option(help="How many recent events first.", min=1, max=1000)] = 20,
    timeout: ForOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """A deployment's events (who, what, when, why), oldest first; --follow for new ones.

    With --follow and --json: one JSON object per line."""
    api = client(server)
    api.get(path(name))  # 404 names a deployment that is not there

    def recent() -> list[dict[str, Any]]:
        return api.get("/api/events", deployment=name, kind=kind, limit=limit)[::-1]

    if not follow_:
        listed = recent()
        show_json(listed) if as_json else typer.echo(views.events(listed))
        return
    seen: set[int] = set()

    def show(event: dict[str, Any]) -> None:
        if event["id"] in seen or (kind is not None and event["kind"] != kind):
            return
        seen.add(event["id"])
        typer.echo(json.dumps(event) if as_json else views.event_line(event))

    def opened() -> None:
        for event in recent():
            show(event)

    try:
        follow(api.target, name, opened, show, timeout, Reconnect("events"))
    except KeyboardInterrupt:
        return


def logs(
    name: Name,
    instance: Annotated[str, typer.Argument(help="The process, e.g. decode-0 or proxy.")],
    lines: Annotated[int, typer.Option(help="How many lines of the tail.", min=1, max=5000)] = 200,
    follow_: FollowOption = False,
    timeout: ForOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """The last lines a process wrote (secrets masked); --follow for new ones.

    With --follow and --json: one JSON object per line."""
    api = client(server)
    where = path(name, f"/logs/{instance}")
    answer = api.get(where, lines=lines)
    if as_json and not follow_:
        show_json(answer)
        return
    shown = answer["lines"]

    def echo(lines: list[str]) -> None:
        for line in lines:
            typer.echo(json.dumps({"instance": instance, "line": line}) if as_json else line)

    echo(shown)
    if not follow_:
        return

    def ask() -> None:
        nonlocal shown
        now = api.get(where, lines=lines)["lines"]
        new, missed = log_tail.fresh(shown, now)
        if missed:
            typer.echo(
                "... (lines written faster than --lines between reads were skipped)", err=True
            )
        echo(new)
        shown = now

    retry = Reconnect("logs", None if timeout is None else time.monotonic() + timeout)
    try:
        poll(retry.asking(ask), lambda _: False, timeout, interval_s=LOG_POLL_S)
    except (TimedOut, KeyboardInterrupt):
        return
