"""`pdctl move NAME INSTANCE --role prefill|decode --reason TEXT`: move one running instance
between prefill and decode by runtime role switching (POST /role-moves), losing no request;
answers once it serves its new role, with the revision that records the move. A refused move
(422 naming the field: unknown instance, not a role-switching NIXL deployment, the last of its
role; 409: not started, or attached behind a proxy pdctl cannot drain without --force, or
engines without /v1/pd_role) exits with the control plane's reason."""

from __future__ import annotations

from typing import Annotated

import typer

from domain.role_moves import DRAIN_TIMEOUT_S
from terminal.session import JsonOption, ServerOption, client, one_of, show_json
from terminal.verbs.read import Name, path

ROLES = ("prefill", "decode")
ANSWER_MARGIN_S = 60.0  # the role call, routing it in its new role, the revision


def move(
    name: Name,
    instance: Annotated[str, typer.Argument(help="The instance to move, e.g. decode-1.")],
    role: Annotated[str, typer.Option(help="The role it serves after the move.")],
    reason: Annotated[str, typer.Option(help="Why: recorded with the revision and its events.")],
    drain_timeout: Annotated[
        float, typer.Option(help="Seconds its legs and its engine may take to drain.", min=1)
    ] = DRAIN_TIMEOUT_S,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Attached behind a proxy that is not pdctl's: move all the same (that proxy "
            "is neither drained nor told the new role).",
        ),
    ] = False,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Move an instance between prefill and decode without a restart (runtime role switch)."""
    if role not in ROLES:
        raise one_of("--role", role, ROLES)
    body = {"instance": instance, "role": role, "reason": reason, "drain_timeout_s": drain_timeout}
    if force:
        body["force"] = True
    api = client(server)
    # The answer comes once the instance serves its new role: after the drain at the most.
    api.timeout_s = max(api.timeout_s, drain_timeout + ANSWER_MARGIN_S)
    moved = api.post(path(name, "/role-moves"), body)
    if as_json:
        show_json(moved)
    else:
        typer.echo(
            f"{name}/{moved['instance']}: {moved['from']} -> {moved['to']} in "
            f"{moved['seconds']:g} s (epoch {moved['epoch']}, revision {moved['revision']})"
        )
        if moved.get("warning"):
            typer.echo(f"warning: {moved['warning']}", err=True)
