"""`pdctl sim`: the stand-in engine's command line (the server arrives with its own issue)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    app.command("sim", help="Run a stand-in vLLM engine (simulated GPU timing).")(sim)


def sim(port: int = typer.Option(8100, "--port", help="HTTP port")) -> None:
    typer.echo(f"stand-in engine server not built yet (port {port})")
    raise typer.Exit(1)
