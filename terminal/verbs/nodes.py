"""`pdctl nodes`: the cluster's nodes through a control plane's REST API (GET
/api/cluster/nodes), as a table or JSON; the server and token as every operator verb finds
them (terminal/config.py)."""

from __future__ import annotations

from typing import Any

import typer

from terminal.session import JsonOption, ServerOption, client, show_json


def nodes(server: ServerOption = None, as_json: JsonOption = False) -> None:
    """List the cluster's nodes: address, GPUs free/total, and what runs on each."""
    listed = client(server).get("/api/cluster/nodes")
    show_json(listed) if as_json else typer.echo(table(listed))


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
