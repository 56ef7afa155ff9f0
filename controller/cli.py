"""`pdctl run-instance` (the instance shim) and `pdctl deploy compose`: argument parsing only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

deploy_app = typer.Typer(
    help="Render a deployment for an existing engine (docker compose).", no_args_is_help=True
)


def run_instance(
    command: Annotated[list[str], typer.Argument(help="The instance's argv, after --.")],
    run_dir: Annotated[Path, typer.Option(help="Directory holding NAME/state.json and logs.")],
    name: Annotated[str, typer.Option(help="Instance name (a directory under --run-dir).")],
    log_max_bytes: Annotated[int, typer.Option(help="Bytes per log file before rotating.")] = (
        10 << 20
    ),
    log_keep: Annotated[int, typer.Option(help="Rotated log files kept.")] = 3,
    foreground: Annotated[
        bool, typer.Option(help="Do not detach; run until the child exits.")
    ] = False,
) -> None:
    """Keep one instance: own its output and logs, record its pid and exit (for pdctl serve)."""
    from controller import shim

    if "/" in name or name in ("", ".", ".."):
        raise typer.BadParameter("--name must be a plain name", param_hint="--name")
    if log_max_bytes < 1 or log_keep < 0:
        raise typer.BadParameter("--log-max-bytes must be >= 1 and --log-keep >= 0")
    if foreground:
        raise typer.Exit(shim.serve(run_dir, name, command, max_bytes=log_max_bytes, keep=log_keep))
    try:
        state = shim.launch(run_dir, name, command, max_bytes=log_max_bytes, keep=log_keep)
    except shim.ShimError as exc:
        typer.echo(f"pdctl run-instance: error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(state))


@deploy_app.command("compose")
def compose(
    name: Annotated[
        str | None, typer.Argument(help="A stored deployment (its current revision and ports).")
    ] = None,
    db: Annotated[Path, typer.Option(help="The control plane's SQLite file.")] = Path("pdctl.db"),
    spec: Annotated[
        Path | None,
        typer.Option(help="A deployment spec (JSON) to render instead of a stored one."),
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            help="Write DIR/docker-compose.yml and DIR/deploy/prometheus.yml (DIR also needs "
            "the repo's deploy/grafana and deploy/Dockerfile) instead of printing."
        ),
    ] = None,
) -> None:
    """Render docker compose for a GPU node: vLLM (ROCm image), proxy, Prometheus, Grafana."""
    from pydantic import ValidationError

    from controller.compose import compose_yaml, prometheus_yaml, render_compose
    from controller.deployment import DeploymentSpec, FieldError, check
    from controller.ports import allocate

    if (name is None) == (spec is None):
        typer.echo("pdctl deploy compose: error: give a deployment NAME or --spec FILE", err=True)
        raise typer.Exit(2)
    try:
        if name is not None:
            deployment, ports = _stored(name, db)
        else:
            deployment = DeploymentSpec.model_validate_json(spec.read_text())
            check(deployment)
            ports = allocate(deployment)
    except (OSError, ValidationError, FieldError, LookupError) as exc:
        typer.echo(f"pdctl deploy compose: error: {exc}", err=True)
        raise typer.Exit(2) from None
    text = compose_yaml(render_compose(deployment, ports))
    if output_dir is None:
        typer.echo(text, nl=False)
        return
    (output_dir / "deploy").mkdir(parents=True, exist_ok=True)
    (output_dir / "docker-compose.yml").write_text(text)
    (output_dir / "deploy" / "prometheus.yml").write_text(prometheus_yaml(deployment, ports))


def _stored(name: str, db: Path):
    """A stored deployment's spec and ports, read without migrating or writing anything."""
    from controller.stored_spec import StoredSpec
    from state.db import create_engine
    from state.errors import NotFound
    from state.store import Store

    if not db.is_file():
        raise LookupError(f"--db {db}: no such file")
    engine = create_engine(db)
    try:
        current = Store(engine, StoredSpec()).get(name)
    except NotFound as exc:
        raise LookupError(str(exc)) from None
    finally:
        engine.dispose()
    return current.spec, current.ports


def register(app: typer.Typer) -> None:
    app.command("run-instance", context_settings={"ignore_unknown_options": True})(run_instance)
    app.add_typer(deploy_app, name="deploy")
