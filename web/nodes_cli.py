"""`pdctl nodes`: the cluster's nodes through a control plane's REST API (GET
/api/cluster/nodes), as a table or JSON. The token comes from PDCTL_TOKEN, never from argv
(which every user of the host can read in /proc)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Annotated, Any

import typer

TOKEN_ENV = "PDCTL_TOKEN"
TIMEOUT_S = 15.0


class NodesError(RuntimeError):
    """One line saying why the nodes could not be listed."""


def nodes(
    server: Annotated[
        str, typer.Option(help="The control plane (`pdctl serve`) to ask.")
    ] = "http://127.0.0.1:8000",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the API's JSON instead of a table.")
    ] = False,
) -> None:
    """List the cluster's nodes: address, GPUs free/total, and what runs on each."""
    try:
        listed = fetch_nodes(server, os.environ.get(TOKEN_ENV) or None)
    except NodesError as exc:
        typer.echo(f"pdctl nodes: error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(listed, indent=2) if as_json else table(listed))


def fetch_nodes(server: str, token: str | None) -> list[dict[str, Any]]:
    url = server.rstrip("/") + "/api/cluster/nodes"
    if not url.startswith(("http://", "https://")):
        raise NodesError(f"--server {server!r} is not an http:// or https:// URL")
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        hint = f" (set {TOKEN_ENV})" if err.code == 401 and not token else ""
        raise NodesError(f"{server} answered {err.code}: {_detail(err)}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise NodesError(f"--server {server}: cannot reach it ({why})") from None
    except ValueError:
        raise NodesError(f"--server {server}: its answer is not JSON (not pdctl serve?)") from None


def _detail(err: urllib.error.HTTPError) -> str:
    try:
        detail = json.loads(err.read()).get("detail")
    except (ValueError, AttributeError, OSError):
        detail = None
    return detail if isinstance(detail, str) else err.reason


def table(listed: list[dict[str, Any]]) -> str:
    """One line per node, then one indented line per process on it."""
    rows = [("NODE", "ADDRESS", "STATE", "GPUS FREE/TOTAL", "PROCESSES")]
    lines_after: dict[int, list[str]] = {}
    for n in listed:
        state = ("alive" if n["alive"] else "dead") + (", head" if n["head"] else "")
        gpus = "not counted" if n["gpus"] is None else f"{n['gpus_free']:g}/{n['gpus']:g}"
        rows.append((n["id"][:12], n["address"], state, gpus, str(len(n["processes"]))))
        lines_after[len(rows) - 1] = [
            f"    {p['deployment']}/{p['process']} ({p['role']}) {p['state']}"
            for p in n["processes"]
        ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for i, row in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        out += lines_after.get(i, [])
    return "\n".join(out)


def register(app: typer.Typer) -> None:
    app.command("nodes")(nodes)
