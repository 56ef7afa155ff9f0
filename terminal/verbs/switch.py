"""`pdctl switch NAME --mode write --reason TEXT`: ask for a zero-loss read/write switch, then
follow its record (GET /switches/{id}) step by step until it is done (exit 0), failed (exit 1,
naming the step and why); a refused switch (409: colocated, already in that mode, a strategy
the layout cannot run) exits 5 with the control plane's reason."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from domain.modes import TRANSFER_MODES
from terminal import exits, views
from terminal.client import ApiClient
from terminal.polling import TimedOut, poll
from terminal.session import JsonOption, ServerOption, client, fail, one_of, show_json
from terminal.verbs.read import Name, path

VERB = "switch"
STRATEGIES = ("hold", "keep-serving", "roll")
MODES = tuple(m.value for m in TRANSFER_MODES)
DEFAULT_TIMEOUT_S = 600.0


def switch(
    name: Name,
    mode: Annotated[str, typer.Option(help="The MoRIIO mode to switch to: read or write.")],
    reason: Annotated[str, typer.Option(help="Why: recorded with the switch and its events.")],
    strategy: Annotated[
        str | None,
        typer.Option(
            help="roll (two or more prefill/decode pairs, one at a time), hold (pause, restart "
            "both, release) or keep-serving (whole requests on the side not restarting). "
            "Default: roll when the deployment has two pairs, else hold.",
            show_default=False,
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Follow the switch until it ends.")
    ] = True,
    timeout: Annotated[
        float,
        typer.Option(help="Seconds to follow it before giving up (exit 1); it goes on.", min=1),
    ] = DEFAULT_TIMEOUT_S,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Switch a deployment's read/write mode, losing no request; shows each step."""
    if mode not in MODES:
        raise one_of("--mode", mode, MODES)
    if strategy is not None and strategy not in STRATEGIES:
        raise one_of("--strategy", strategy, STRATEGIES)
    api = client(server)
    chosen = strategy or default_strategy(api.get(path(name))["spec"])
    body = {"mode": mode, "strategy": chosen, "reason": reason}
    record = api.post(path(name, "/switch"), body)
    typer.echo(f"{name}: switch {record['id']} to {mode} by {chosen} begun", err=True)
    if wait:
        record = _follow(api, name, record, timeout)
    if as_json:
        show_json(record)
    elif record["state"] != "failed":
        typer.echo(views.switch_outcome(record) if wait else f"{record['id']} running")
    if record["state"] == "failed":
        fail(VERB, views.switch_outcome(record), exits.FAILED)


def default_strategy(spec: dict[str, Any]) -> str:
    """roll when one pair can serve while another restarts, else hold."""
    roles = [g["role"] for g in spec["groups"]]
    return "roll" if roles.count("prefill") >= 2 and roles.count("decode") >= 2 else "hold"


def _follow(api: ApiClient, name: str, record: dict[str, Any], timeout: float) -> dict:
    shown = [views.switch_step(record)]
    where = path(name, f"/switches/{record['id']}")

    def ask() -> dict[str, Any]:
        now = api.get(where)
        step = views.switch_step(now)
        if now["state"] == "running" and step != shown[-1]:
            typer.echo(f"  {record['id']} {step}", err=True)
            shown.append(step)
        return now

    try:
        return poll(ask, lambda r: r["state"] != "running", timeout)
    except KeyboardInterrupt:
        fail(VERB, f"interrupted: switch {record['id']} goes on in the server", exits.INTERRUPTED)
    except TimedOut as out:
        fail(
            VERB,
            f"switch {record['id']} still running after --timeout {timeout:g} s at "
            f"{views.switch_step(out.last)} (it goes on; pdctl events {name} --follow)",
            exits.FAILED,
        )
