"""`pdctl start|stop|restart NAME`: ask the control plane, then (unless --no-wait) show each
process's state as it changes until every instance is up (or down), bounded by --timeout. A
restart is a rollout (controller/rollout/): it follows the rollout's steps to its end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from terminal import exits, readiness, rollout_views
from terminal.client import ApiClient
from terminal.polling import TimedOut, poll
from terminal.readiness import Goal
from terminal.session import JsonOption, ReasonOption, ServerOption, client, fail, show_json
from terminal.verbs.read import Name, path, status
from terminal.verbs.rollout import StrategyOption, settle, strategy_checked
from terminal.verbs.rollout_follow import follow

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
    strategy: StrategyOption = None,
    wait: WaitOption = True,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    reason: ReasonOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Restart as a rollout: what drifted from the desired revision, else every instance (or one).

    A pending revision is rolled out. Follows the rollout step by step until it ends."""
    strategy_checked(strategy)
    api = client(server)
    before = _last_rollout(api, name)
    query = {"reason": reason, "instance": instance, "strategy": strategy}
    units = api.post(path(name, "/restart"), **query)
    began = _last_rollout(api, name)
    if began is None or began["id"] == (before or {}).get("id"):
        typer.echo(f"{name}: restart asked: {readiness.summary(units)}")  # no rollout to show
        return
    typer.echo(rollout_views.begun(began), err=True)
    if not wait and as_json:
        show_json(began)
    elif not wait:
        typer.echo(f"rollout {began['id']} running; `pdctl rollout status {name}` follows it")
    else:
        ended = follow(api, "restart", began, timeout)
        settle("restart", ended, ended.done, as_json)


def _last_rollout(api: ApiClient, name: str) -> dict[str, Any] | None:
    """The rollout running, else the last one (404 for a deployment that is not there)."""
    return api.get(path(name, "/rollout"))["rollout"]


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
