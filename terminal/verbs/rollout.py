"""`pdctl rollout status|abort|undo|history NAME`: every change to a running deployment is a
rollout (controller/rollout/), watched, stopped and undone as `kubectl rollout` spells it,
through GET/POST /api/deployments/NAME/rollout...

status follows the running rollout step by step until it ends (exit 0 done; 1 failed,
aborted or past --timeout); with none running it shows the last one and each process's
truth, exit 0 only when the desired revision is applied. abort and undo follow what they
began. A refusal (409: nothing to abort, a rollout holds it; 404: no such revision) is the
server's one line with its exit code (terminal/exits.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from terminal import exits
from terminal import rollout_views as views
from terminal.session import (
    JsonOption,
    ReasonOption,
    ServerOption,
    client,
    command,
    fail,
    one_of,
    show_json,
)
from terminal.verbs.read import Name, path
from terminal.verbs.rollout_follow import Ended, follow

GROUP = "rollout"
STRATEGIES = views.STRATEGIES
DEFAULT_TIMEOUT_S = 600.0  # a real engine's cold start takes minutes

StrategyOption = Annotated[
    str | None,
    typer.Option(
        help="roll (one prefill/decode pair at a time while the others serve), hold (new "
        "requests wait in the proxy while the changed instances restart) or recreate (all at "
        "once). Default: roll where the layout allows it, else hold.",
        show_default=False,
    ),
]
FollowOption = Annotated[
    bool, typer.Option("--wait/--no-wait", help="Follow the rollout until it ends.")
]
TimeoutOption = Annotated[
    float,
    typer.Option(help="Seconds to follow it before giving up (exit 1); it goes on.", min=1),
]


def strategy_checked(strategy: str | None) -> str | None:
    if strategy is not None and strategy not in STRATEGIES:
        raise one_of("--strategy", strategy, STRATEGIES)
    return strategy


def status(
    name: Name,
    once: Annotated[
        bool, typer.Option("--once", help="Print where it is once; do not follow.")
    ] = False,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Follow the running rollout step by step until it ends, or show the last one.

    With none running: the last rollout and each process's revision, desired revision and
    drift. Exit 0 when the rollout ends done (with none running: when the desired revision is
    applied); 1 when it failed or was aborted, or is still running at --timeout. --json
    prints the API's answer once (exit 0 only when applied)."""
    verb = f"{GROUP} status"
    api = client(server)
    body = api.get(path(name, "/rollout"))
    rec = body["rollout"]
    if as_json or once or rec is None or not views.ongoing(rec, rec):
        show_json(body) if as_json else typer.echo(views.status(body))
        if not body["applied"]:
            raise typer.Exit(exits.FAILED)
        return
    typer.echo(f"{views.begun(rec)}; at {views.where(rec)}", err=True)
    ended = follow(api, verb, rec, timeout)
    settle(verb, ended, ended.done, as_json)


def abort(
    name: Name,
    reason: ReasonOption = None,
    wait: FollowOption = True,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stop the running rollout where it is, then roll back; follows the rollback.

    Routing is put back and the last applied revision rolled out again; exit 0 when that
    rollback is done."""
    verb = f"{GROUP} abort"
    api = client(server)
    rec = api.post(path(name, "/rollout/abort"), reason=reason)
    typer.echo(f"{name}: aborting {views.title(rec)} at {views.where(rec)}; {_then(rec)}", err=True)
    if not wait:
        show_json(rec) if as_json else typer.echo(_asked(rec, "aborting"))
        return
    ended = follow(api, verb, rec, timeout)
    settle(verb, ended, ended.rolled_back, as_json)


def undo(
    name: Name,
    to_revision: Annotated[
        int | None,
        typer.Option(
            help="The revision to go back to (default: the applied one before the one "
            "desired now).",
            min=1,
            show_default=False,
        ),
    ] = None,
    strategy: StrategyOption = None,
    reason: ReasonOption = None,
    wait: FollowOption = True,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Roll back to an earlier revision: its spec as a new revision, rolled out.

    The deployment must be running, with no rollout in progress; follows the rollout."""
    verb = f"{GROUP} undo"
    body = {"to_revision": to_revision, "strategy": strategy_checked(strategy), "reason": reason}
    api = client(server)
    answer = api.post(path(name, "/rollout/undo"), {k: v for k, v in body.items() if v})
    rec = answer["rollout"]
    if rec is None:
        typer.echo(f"{name}: revision {answer['revision']} is what runs: nothing to roll out")
        return
    typer.echo(f"{views.begun(rec)} ({rec.get('reason') or 'undo'})", err=True)
    if not wait:
        show_json(rec) if as_json else typer.echo(_asked(rec, "running"))
        return
    ended = follow(api, verb, rec, timeout)
    settle(verb, ended, ended.done, as_json)


def history(
    name: Name,
    limit: Annotated[int, typer.Option(help="How many, newest first.", min=1, max=500)] = 20,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """A deployment's rollouts, newest first: how each ended, how long it took, why."""
    listed = client(server).get(path(name, "/rollouts"), limit=limit)
    if as_json:
        show_json(listed)
    elif not listed:
        typer.echo(f"No rollouts of {name} yet.")
    else:
        typer.echo(views.history(listed))


def settle(verb: str, ended: Ended, ok: bool, as_json: bool = False) -> None:
    """The outcome on stdout (or the record as JSON); when not `ok`, exit 1 saying why."""
    if as_json:
        show_json(ended.rollout)
    elif ok:
        typer.echo(ended.outcome())
    if not ok:
        fail(verb, ended.outcome(), exits.FAILED)


def _then(rec: dict[str, Any]) -> str:
    if rec.get("auto_rollback") and rec.get("from_revision") is not None:
        return f"it rolls back to revision {rec['from_revision']}"
    return "it stops there: no revision to roll back to"


def _asked(rec: dict[str, Any], state: str) -> str:
    return f"rollout {rec['id']} {state}; `pdctl rollout status {rec['deployment']}` follows it"


VERBS: dict[str, Callable[..., Any]] = {
    "status": status,
    "abort": abort,
    "undo": undo,
    "history": history,
}


def register(app: typer.Typer) -> None:
    """`pdctl rollout VERB`, each guarded as every verb is."""
    group = typer.Typer(
        name=GROUP,
        help="Watch, abort and undo the rollouts that change a running deployment.",
        no_args_is_help=True,
    )
    for verb, fn in VERBS.items():
        command(group, verb, fn, group=GROUP)
    app.add_typer(group, name=GROUP)
