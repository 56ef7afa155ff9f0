"""`pdctl start|stop|restart NAME`: ask the control plane, then (unless --no-wait) show each
process's state as it changes until every instance is up (or down), bounded by --timeout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from terminal import exits, readiness
from terminal.client import ApiClient
from terminal.polling import TimedOut, poll
from terminal.readiness import Goal
from terminal.session import JsonOption, ReasonOption, ServerOption, client, fail, show_json
from terminal.verbs.read import Name, path, status

DEFAULT_TIMEOUT_S = 600.0  # a real engine's cold start takes minutes (README: ~6 min)

WaitOption = Annotated[
    bool, typer.Option("--wait/--no-wait", help="Wait, showing progress, until it is done.")
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        help="Seconds to wait before giving up (exit 1); it goes on in the server.", min=1
    ),
]


def _whole(verb: str, goal: Goal, doc: str) -> Callable[..., None]:
    """`pdctl start` and `pdctl stop`: the same flags, another action and goal."""

    def run(
        name: Name,
        wait: WaitOption = True,
        timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
        reason: ReasonOption = None,
        server: ServerOption = None,
        as_json: JsonOption = False,
    ) -> None:
        _act(client(server), verb, name, {"reason": reason}, goal, wait, timeout, as_json)

    run.__doc__ = doc
    return run


start = _whole(
    "start",
    Goal("up"),
    "Start a deployment's processes (the proxy and every instance) at its current revision.",
)
stop = _whole("stop", Goal("down"), "Stop a deployment's processes (instances drain first).")


def restart(
    name: Name,
    instance: Annotated[
        str | None, typer.Option(help="Restart only this instance (e.g. decode-0).")
    ] = None,
    wait: WaitOption = True,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    reason: ReasonOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Restart a deployment's instances (or one), each on a new process."""
    api = client(server)
    before = {
        u["name"]: u.get("pid")
        for u in status(api, name)
        if u["role"] != "proxy" and instance in (None, u["name"])
    }
    query = {"reason": reason, "instance": instance}
    _act(api, "restart", name, query, Goal("up", before), wait, timeout, as_json)


def _act(
    api: ApiClient,
    verb: str,
    name: str,
    query: dict[str, Any],
    goal: Goal,
    wait: bool,
    timeout: float,
    as_json: bool,
) -> None:
    units = api.post(path(name, f"/{verb}"), **query)
    if wait:
        units = _wait(api, verb, name, goal, units, timeout)
    if as_json:
        show_json(units)
    elif wait:
        typer.echo(f"{name}: {verb} done: {readiness.summary(units)}")
    else:
        typer.echo(f"{name}: {verb} asked: {readiness.summary(units)}")


def _wait(
    api: ApiClient, verb: str, name: str, goal: Goal, asked: list, timeout: float
) -> list[dict[str, Any]]:
    seen: dict[str, str] = {u["name"]: u["state"] for u in asked}  # changes from here on

    def ask() -> list[dict[str, Any]]:
        nonlocal seen
        now = status(api, name)
        for line in readiness.changes(seen, now):
            typer.echo(f"  {line}", err=True)
        seen = {u["name"]: u["state"] for u in now}
        return now

    try:
        units = poll(ask, lambda us: goal.verdict(us)[0], timeout)
    except KeyboardInterrupt:
        fail(verb, f"interrupted: the {verb} of {name} goes on in the server", exits.INTERRUPTED)
    except TimedOut as out:
        fail(
            verb,
            f"{name}: not done within --timeout {timeout:g} s: {readiness.summary(out.last)} "
            "(it goes on in the server; pdctl show " + name + ")",
            exits.FAILED,
        )
    _, why = goal.verdict(units)
    if why:
        fail(verb, f"{name}: {why} (pdctl logs {name} INSTANCE)", exits.FAILED)
    return units
