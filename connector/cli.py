"""`pdctl proxy`: its flags are ProxySettings' fields (connector/flags.py); the proxy lives in
connector.proxy and connector.server."""

from __future__ import annotations

import logging

import typer

from connector.flags import command
from connector.settings import ProxySettings


def proxy(settings: ProxySettings) -> None:
    """Run the prefill/decode proxy: split, stream, measure."""
    from connector.api.admin_token import runtime_dir, write_generated_token
    from connector.server import ListenError, serve

    if not settings.admin_token:
        path = settings.admin_token_file or (
            runtime_dir(settings.runtime_dir) / f"proxy-{settings.port}.admin-token"
        )
        try:
            token = write_generated_token(path)
        except OSError as exc:
            raise typer.BadParameter(
                f"cannot write the generated admin token to {path}: {exc.strerror}",
                param_hint="--admin-token-file",
            ) from None
        settings = settings.model_copy(update={"admin_token": token})
        typer.echo(f"pdctl proxy: /admin needs the token written to {path} (0600)", err=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        serve(settings)
    except ListenError as exc:
        typer.echo(f"pdctl proxy: {exc}", err=True)
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    app.command("proxy")(command(proxy))
