"""`pdctl apply -f SPEC`: create the deployment, or store the spec as its next revision, and
show what changed. The edit is made from the revision read just before (or the file's
`revision`, or --revision), sent as If-Match: if another was stored since, nothing is stored
and the 409 says who wrote which revision and what it changed (exit 5).

On a running deployment the new revision is rolled out at once (which instances restart, by
which strategy; --wait follows it to its end), or with --no-rollout stored pending until
`pdctl restart` rolls it out; never a revision stored while the old one silently runs."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from terminal import exits
from terminal import rollout_views as rollout_view
from terminal.client import ApiClient, ApiError, problems
from terminal.session import (
    JsonOption,
    ReasonOption,
    ServerOption,
    Usage,
    client,
    fail,
    show_json,
)
from terminal.specs import diff as spec_diff
from terminal.specs.files import read_spec
from terminal.tables import clock
from terminal.verbs.read import path
from terminal.verbs.rollout import (
    DEFAULT_TIMEOUT_S,
    StrategyOption,
    TimeoutOption,
    strategy_checked,
)
from terminal.verbs.rollout_follow import follow

VERB = "apply"
STALE = "was made from revision"  # what the store's StaleRevision says


def apply(
    file: Annotated[
        str,
        typer.Option(
            "--file",
            "-f",
            help="The spec: a .json, .yaml or .yml file, or - for stdin (YAML).",
            show_default=False,
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check it and show the diff; store nothing.")
    ] = False,
    revision: Annotated[
        int | None,
        typer.Option(
            help="Store only if the deployment is still at this revision (default: the file's "
            "`revision`, else the one read just before).",
            min=1,
        ),
    ] = None,
    no_rollout: Annotated[
        bool,
        typer.Option(
            "--no-rollout",
            help="On a running deployment: store the revision pending, not rolled out "
            "(`pdctl restart NAME` rolls it out).",
        ),
    ] = False,
    strategy: StrategyOption = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow the rollout it begins until it ends.")
    ] = False,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    reason: ReasonOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a deployment from a spec file, or store a new revision of it.

    Prints each change (~ changed, + added, - removed); --dry-run stores nothing. On a
    running deployment the revision is rolled out (or, with --no-rollout, stored pending)."""
    strategy_checked(strategy)
    if no_rollout and (strategy is not None or wait):
        flag = "--strategy" if strategy is not None else "--wait"
        raise Usage(f"{flag} goes with a rollout: drop --no-rollout, or {flag}")
    spec = read_spec(file)
    in_file = spec.pop("revision", None)  # an edit of what `show --json` gave keeps it
    based_on = revision or in_file
    api = client(server)
    current = _current(api, spec["name"])
    made_from = None if current is None else based_on or current["revision"]
    query = {
        "dry_run": _flag(dry_run),
        "rollout": "false" if no_rollout else None,
        "strategy": strategy,
    }
    try:
        if made_from is None:
            answer = _create(api, spec, reason, dry_run)
        else:
            answer = _replace(api, spec, made_from, reason, query)
    except ApiError as exc:
        _refused(api, file, spec["name"], made_from, exc)
    began = None if dry_run else answer.get("rollout")
    if not as_json:
        for line in report(current, answer, dry_run, strategy, held=no_rollout):
            typer.echo(line)
    elif not (wait and began):
        show_json(answer)
    if wait and began:
        _follow(api, answer, began, timeout, as_json)


def _follow(api: ApiClient, answer: dict, began: dict, timeout: float, as_json: bool) -> None:
    """--wait: the rollout to its end; exit 1 saying how it failed."""
    ended = follow(api, VERB, began, timeout)
    if as_json:
        show_json({**answer, "rollout": ended.rollout})
    elif ended.done:
        typer.echo(ended.outcome())
    if not ended.done:
        fail(VERB, ended.outcome(), exits.FAILED)


def _current(api: ApiClient, name: str) -> dict[str, Any] | None:
    try:
        return api.get(path(name))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def _create(api: ApiClient, spec: dict, reason: str | None, dry_run: bool) -> Any:
    return api.call(
        "POST", "/api/deployments", spec, query={"reason": reason, "dry_run": _flag(dry_run)}
    ).body


def _replace(
    api: ApiClient, spec: dict, based_on: int, reason: str | None, query: dict[str, Any]
) -> Any:
    """PUT the spec; `query`: dry_run, rollout (false: stored pending) and strategy."""
    return api.call(
        "PUT",
        path(spec["name"]),
        spec,
        query={"reason": reason, **query},
        headers={"If-Match": f'"{based_on}"'},
    ).body


def _flag(on: bool) -> str | None:
    return "true" if on else None


def report(
    current: dict | None,
    answer: dict,
    dry_run: bool,
    strategy: str | None = None,
    held: bool = False,
) -> list[str]:
    """What apply prints: created, unchanged, or the revision it became and each change; on
    a running deployment, the rollout it began (a dry run: would begin) or that it is
    stored pending (`held`: --no-rollout); on a stopped one, that it runs at the next
    start."""
    name, number = answer["name"], answer["revision"]
    would = " (dry run: nothing stored)" if dry_run else ""
    if current is None:
        verb = "would be created" if dry_run else "created"
        starts = "" if dry_run else f": `pdctl start {name}` runs it"
        return [f"{name} {verb} at revision {number}{would}{starts}"]
    if number == current["revision"]:
        return [f"{name} unchanged at revision {number}"]
    found = spec_diff.lines(spec_diff.changes(current["spec"], answer["spec"]))
    found += spec_diff.lines(spec_diff.changes(current["ports"], answer["ports"]), "ports.")
    said = [f"{name}: revision {current['revision']} -> {number}{would}"]
    said += [f"  {line}" for line in found]
    if answer.get("rollout") is not None and dry_run:
        said += rollout_view.would_roll_out(answer["rollout"], strategy)
    elif answer.get("rollout") is not None:
        said.append(rollout_view.rolling_out(answer["rollout"]))
    elif answer.get("state") == "pending" and not dry_run:
        said.append(rollout_view.stored_pending(name, number, held))
    return said


def _refused(api: ApiClient, file: str, name: str, based_on: int | None, exc: ApiError) -> None:
    """One line per field the API refused (exit 2: a bad spec file, whether the file's syntax
    or the server's checks of its content say so), or a 409 that says who changed what."""
    if exc.status == 422:
        for line in problems(exc.detail):
            typer.echo(f"pdctl {VERB}: error: {file}: {line}", err=True)
        raise typer.Exit(exits.USAGE)
    if exc.status == 409 and based_on is not None and STALE in exc.message:
        fail(VERB, exc.message + stale_story(api, name, based_on), exc.code)
    raise exc


def stale_story(api: ApiClient, name: str, based_on: int) -> str:
    """`; revision 4 by operator:alice at ... (why): changed slo.ttft_ms`, best effort."""
    try:
        now = api.get(path(name))
        changed = api.get(path(name, "/diff"), **{"from": based_on, "to": now["revision"]})
    except ApiError:
        return ""
    return story(now, changed)


def story(now: dict, changed: dict) -> str:
    fields = [".".join(str(p) for p in c["path"]) for c in changed["changes"]]
    why = f" ({now['reason']})" if now.get("reason") else ""
    return (
        f"; revision {now['revision']} was written by {now['actor']} at "
        f"{clock(now['updated_at'])}{why}, changing {', '.join(fields) or 'no spec field'}"
    )
