"""`pdctl ls`, `show`, `history`, `diff`, `advise`: reading deployments through the API (a
viewer's token is enough)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote

import typer

from terminal import views
from terminal.client import ApiClient, ApiError
from terminal.config import ConfigProblem, resolve
from terminal.session import JsonOption, ServerOption, client, show_json
from terminal.specs import diff as spec_diff

WINDOWS = ("10s", "1m", "5m")
COMPLETION_TIMEOUT_S = 2.0


def complete_names(incomplete: str) -> list[str]:
    """Shell completion of a deployment's name: the server's, or none when it cannot say."""
    try:
        api = ApiClient(resolve(None), timeout_s=COMPLETION_TIMEOUT_S)
        return [d["name"] for d in api.get("/api/deployments") if d["name"].startswith(incomplete)]
    except (ApiError, ConfigProblem):
        return []


Name = Annotated[
    str,
    typer.Argument(help="The deployment.", show_default=False, autocompletion=complete_names),
]


def path(name: str, tail: str = "") -> str:
    return f"/api/deployments/{quote(name, safe='')}{tail}"


def status(api: ApiClient, name: str) -> list[dict[str, Any]]:
    return api.get(path(name, "/status"))


def ls(server: ServerOption = None, as_json: JsonOption = False) -> None:
    """List the deployments: revision and its state, topology, mode, model, instances ready."""
    api = client(server)
    listed = api.get("/api/deployments")
    if as_json:
        show_json(listed)
        return
    if not listed:
        typer.echo("No deployments (pdctl apply -f SPEC to create one).")
        return
    statuses = {d["name"]: status(api, d["name"]) for d in listed}
    typer.echo(views.deployments(listed, statuses, datetime.now(UTC)))


def show(name: Name, server: ServerOption = None, as_json: JsonOption = False) -> None:
    """Show a deployment: spec, revision, state, instances (node, mode, health)."""
    api = client(server)
    current = api.get(path(name))
    units = status(api, name)
    pilot = api.get(path(name, "/autopilot")) if current["spec"].get("autopilot") else None
    if as_json:
        show_json({"deployment": current, "instances": units, "autopilot": pilot})
        return
    typer.echo(views.deployment(current, units, pilot))


def history(name: Name, server: ServerOption = None, as_json: JsonOption = False) -> None:
    """List a deployment's revisions, newest first (* marks the current one)."""
    api = client(server)
    listed = api.get(path(name, "/revisions"))
    if as_json:
        show_json(listed)
        return
    current = api.get(path(name))["revision"]
    typer.echo(views.revisions(listed, current))


def diff(
    name: Name,
    rev1: Annotated[int, typer.Argument(help="The older revision.", min=1)],
    rev2: Annotated[int, typer.Argument(help="The newer revision.", min=1)],
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """What changed between two revisions, field by field (ports apart)."""
    answer = client(server).get(path(name, "/diff"), **{"from": rev1, "to": rev2})
    if as_json:
        show_json(answer)
        return
    found = spec_diff.lines(answer["changes"]) + spec_diff.lines(
        answer["port_changes"], prefix="ports."
    )
    typer.echo(f"revision {rev1} -> {rev2}: " + (f"{len(found)} change(s)" if found else "none"))
    for line in found:
        typer.echo(f"  {line}")
