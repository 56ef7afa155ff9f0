"""`pdctl pause NAME [--group G]`, `pdctl release NAME [--group G]`, `pdctl drain NAME
INSTANCE`, `pdctl undrain NAME INSTANCE`: the deployment's pdctl proxy holds a group's new
requests or lets them go, sends an instance no new legs or routes to it again (POST
/proxy/{verb}). On an attached deployment whose proxy is not pdctl's each is refused (409)
with the reason."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from terminal.session import JsonOption, ReasonOption, ServerOption, client, one_of, show_json
from terminal.verbs.read import Name, path

GROUPS = ("read", "write", "colocated")
Group = Annotated[
    str | None, typer.Option(help="One proxy group: read, write or colocated (default: all).")
]
Instance = Annotated[str, typer.Argument(help="The instance, e.g. decode-1.")]


def _call(
    name: str, verb: str, body: dict[str, Any], reason: str | None, server, as_json: bool
) -> None:
    done = client(server).post(path(name, f"/proxy/{verb}"), {**body, "reason": reason})
    if as_json:
        show_json(done)
        return
    what = done.get("instance") or ", ".join(done.get("groups", []))
    unlisted = "" if done.get("listed", True) else " (the proxy does not route to it)"
    typer.echo(f"{name}: {verb} {what} at {done['proxy']}{unlisted}")


def _group(group: str | None) -> dict[str, Any]:
    if group is not None and group not in GROUPS:
        raise one_of("--group", group, GROUPS)
    return {"group": group} if group is not None else {}


def pause(
    name: Name,
    group: Group = None,
    reason: ReasonOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Hold new requests at the deployment's pdctl proxy (in its bounded queue)."""
    _call(name, "pause", _group(group), reason, server, as_json)


def release(
    name: Name,
    group: Group = None,
    reason: ReasonOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Let the requests a pause held go on."""
    _call(name, "release", _group(group), reason, server, as_json)


def drain(
    name: Name,
    instance: Instance,
    reason: ReasonOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Send an instance no new requests at the proxy (those it serves finish)."""
    _call(name, "drain", {"instance": instance}, reason, server, as_json)


def undrain(
    name: Name,
    instance: Instance,
    reason: ReasonOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Route to a drained instance again."""
    _call(name, "undrain", {"instance": instance}, reason, server, as_json)
