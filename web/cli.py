"""`pdctl serve`: argument parsing only; the app is web.app.create_app."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from controller import RayBackend
    from web.settings import Settings


def serve(
    host: Annotated[
        str | None, typer.Option(help="Address to bind (default 127.0.0.1, or PDCTL_HOST).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="HTTP port (default 8000, or PDCTL_PORT).")
    ] = None,
    db: Annotated[
        Path | None, typer.Option(help="SQLite file (default pdctl.db, or PDCTL_DB).")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Run deployments on this existing Ray cluster (its GCS HOST:PORT, or "
            "PDCTL_RAY_ADDRESS); default: local processes."
        ),
    ] = None,
) -> None:
    """Run the control plane: migrate the database to head, then serve the API."""
    import uvicorn
    from pydantic import ValidationError

    from state.db import DatabaseDamaged, check_intact
    from web.app import create_app
    from web.database import lock as db_lock
    from web.process import serve_logs, stall_dump
    from web.security import deadlines
    from web.security.auth import is_loopback
    from web.settings import Settings

    given = {"host": host, "port": port, "db": db, "ray_address": ray_address}
    flags: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    try:
        settings = Settings(**flags)
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from None
    backend = _cluster_backend(settings)
    if not settings.auth_enabled and not is_loopback(settings.host):
        raise typer.BadParameter(
            f"refusing to bind {settings.host} without tokens: anyone who can reach it could "
            "change deployments. Set PDCTL_OPERATOR_TOKENS (and PDCTL_VIEWER_TOKENS), or "
            "bind loopback (--host 127.0.0.1).",
            param_hint="--host",
        )
    _check_port_free(settings.host, settings.port)
    try:
        lock = db_lock.hold(settings.db)  # held until this process ends
        check_intact(settings.db)
    except (db_lock.DatabaseInUse, DatabaseDamaged, OSError) as exc:
        typer.echo(f"pdctl serve: error: {exc}", err=True)
        raise typer.Exit(2) from None
    app = create_app(settings, backend=backend)
    stall_dump.on_signal()  # `kill -USR1 <pid>`: every thread's stack in the log
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        log_config=serve_logs.config(),
        timeout_graceful_shutdown=5,
        # The socket's peer is the client: no X-Forwarded-For is believed unless
        # PDCTL_FORWARDED_ALLOW_IPS names the proxy that sets it (uvicorn would trust
        # 127.0.0.1's by default, and so anyone's on this host).
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=",".join(settings.forwarded_allow_ips) or "",
        http=deadlines.protocol(settings.header_timeout_s, settings.body_timeout_s),
    )
    lock.close()
    if app.state.left_running:  # Ctrl-C: say what keeps running and how to stop it
        typer.echo(app.state.left_running, err=True)


def _cluster_backend(settings: Settings) -> RayBackend | None:
    """The Ray backend, joined before anything else happens: an unreachable cluster is one
    line naming the flag, and nothing starts."""
    address = getattr(settings, "ray_address", None)
    if not address:
        return None
    from controller import RayBackend, RayUnreachable

    backend = RayBackend(
        address,
        namespace=settings.ray_namespace,
        node_ip=settings.ray_node_ip,
    )
    try:
        backend.connect()
    except RayUnreachable as exc:
        typer.echo(f"pdctl serve: error: --ray-address: {exc}", err=True)
        raise typer.Exit(2) from None
    return backend


def _check_port_free(host: str, port: int) -> None:
    """Refuse a taken port by its flag, before migrating or starting anything."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise typer.BadParameter(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}", param_hint="--port"
            ) from None


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
