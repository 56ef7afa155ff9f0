"""`pdctl run-instance` (the instance shim), `pdctl deploy compose` and `pdctl deploy k8s`:
argument parsing only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

deploy_app = typer.Typer(
    help="Render a deployment for an existing engine (docker compose, Kubernetes).",
    no_args_is_help=True,
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
    orphan_grace: Annotated[
        float | None,
        typer.Option(
            help="With --foreground: when our parent dies, stop the child (SIGTERM, then "
            "SIGKILL after this many seconds)."
        ),
    ] = None,
) -> None:
    """Keep one instance: own its output and logs, record its pid and exit (for pdctl serve)."""
    from controller.backends import shim

    if "/" in name or name in ("", ".", ".."):
        raise typer.BadParameter("--name must be a plain name", param_hint="--name")
    if log_max_bytes < 1 or log_keep < 0:
        raise typer.BadParameter("--log-max-bytes must be >= 1 and --log-keep >= 0")
    if foreground:
        raise typer.Exit(
            shim.serve(
                run_dir,
                name,
                command,
                max_bytes=log_max_bytes,
                keep=log_keep,
                orphan_grace=orphan_grace,
            )
        )
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
    from controller.manifests.compose import compose_yaml, prometheus_yaml, render_compose
    from controller.manifests.k8s_meta import field_path

    if (name is None) == (spec is None):
        typer.echo("pdctl deploy compose: error: give a deployment NAME or --spec FILE", err=True)
        raise typer.Exit(2)
    try:
        deployment, ports = _spec_and_ports(name, db, spec)
    except (_SpecUnreadable, ValueError) as exc:
        loc = getattr(exc, "loc", None)
        message = f"{field_path(loc)}: {exc}" if loc else str(exc)
        typer.echo(f"pdctl deploy compose: error: {message}", err=True)
        raise typer.Exit(2) from None
    text = compose_yaml(render_compose(deployment, ports))
    if output_dir is None:
        typer.echo(text, nl=False)
        return
    (output_dir / "deploy").mkdir(parents=True, exist_ok=True)
    (output_dir / "docker-compose.yml").write_text(text)
    (output_dir / "deploy" / "prometheus.yml").write_text(prometheus_yaml(deployment, ports))


@deploy_app.command("k8s")
def k8s(
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
        typer.Option("--output-dir", "-o", help="Write DIR/NAME.yaml instead of printing."),
    ] = None,
    image: Annotated[
        str | None, typer.Option(help="vLLM's image (default: vLLM's ROCm or CUDA image).")
    ] = None,
    pdctl_image: Annotated[
        str, typer.Option(help="pdctl's image (deploy/Dockerfile): the proxy and stand-ins.")
    ] = "pdctl:latest",
    pod_network: Annotated[
        list[str] | None,
        typer.Option(
            help="A pod network that may register with a MoRIIO proxy (repeat; default the "
            "private ranges 10/8, 172.16/12, 192.168/16, fd00::/8)."
        ),
    ] = None,
) -> None:
    """Render Kubernetes manifests: engines, the proxy and its Service, a PodMonitor."""
    import ipaddress

    from controller.manifests.k8s import PRIVATE_NETWORKS, K8sSettings, manifests_yaml, render_k8s
    from controller.manifests.k8s_meta import field_path

    def fail(message: str) -> typer.Exit:
        typer.echo(f"pdctl deploy k8s: error: {message}", err=True)
        return typer.Exit(2)

    if (name is None) == (spec is None):
        raise fail("give a deployment NAME or --spec FILE")
    for net in pod_network or ():
        try:
            ipaddress.ip_network(net, strict=False)
        except ValueError:
            raise fail(f"--pod-network {net!r} is not an address or a network") from None
    try:
        deployment, ports = _spec_and_ports(name, db, spec)
        settings = K8sSettings(image, pdctl_image, tuple(pod_network or PRIVATE_NETWORKS))
        text = manifests_yaml(render_k8s(deployment, ports, settings), deployment)
    except _SpecUnreadable as exc:
        raise fail(str(exc)) from None
    except ValueError as exc:  # FieldError, NotOnKubernetes: located at the field
        raise fail(f"{field_path(getattr(exc, 'loc', ()))}: {exc}") from None
    if output_dir is None:
        typer.echo(text, nl=False)
        return
    target = output_dir / f"{deployment.name}.yaml"
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    except OSError as exc:
        raise fail(f"--output-dir {output_dir}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {target}", err=True)


class _SpecUnreadable(Exception):
    """A spec file or stored deployment that cannot be read: one line naming the flag."""


def _spec_and_ports(name: str | None, db: Path, spec: Path | None):
    """The spec and its ports (a stored deployment's, or allocated for a file's), checked as
    `pdctl serve` checks what it starts: its rules and the engine allowlists (the spec's own
    unsafe_allow honoured: whoever applies the manifests is the cluster's operator)."""
    from pydantic import ValidationError

    from controller.launch.ports import allocate
    from controller.manifests.k8s_meta import field_path
    from controller.spec.deployment import DeploymentSpec
    from controller.spec.field_error import FieldError
    from controller.spec.rules import check
    from controller.spec.surface.reach import reach_for, roots_variable
    from controller.spec.validation import engine_problems

    if name is not None:
        try:
            deployment, ports = _stored(name, db)
        except LookupError as exc:
            raise _SpecUnreadable(str(exc).strip("'\"")) from None
    elif spec is None:  # the callers ask for one of the two
        raise _SpecUnreadable("give a deployment NAME or --spec FILE")
    else:
        try:
            deployment = DeploymentSpec.model_validate_json(spec.read_text())
        except OSError as exc:
            raise _SpecUnreadable(f"--spec {spec}: {exc.strerror or exc}") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = field_path(tuple(first["loc"]))
            raise _SpecUnreadable(f"--spec {spec}: {where}: {first['msg']}") from None
        check(deployment)
        ports = allocate(deployment)
    reach = reach_for(roots_variable(os.environ), os.environ)
    if problems := engine_problems(deployment, overrides_on=True, reach=reach):
        raise FieldError(problems[0].loc, problems[0].msg)
    return deployment, ports


def _stored(name: str, db: Path):
    """A stored deployment's spec and ports, read without migrating or writing anything."""
    from controller.launch.stored_spec import StoredSpec
    from state.db import create_engine
    from state.errors import NotFound
    from state.store import Store

    if not db.is_file():
        raise LookupError(f"--db {db}: no such file")
    engine = create_engine(db)
    try:
        current = Store(engine, StoredSpec()).get(name)  # type: ignore[arg-type]  # read only: get() never admits
    except NotFound as exc:
        raise LookupError(str(exc)) from None
    finally:
        engine.dispose()
    return current.spec, current.ports


def register(app: typer.Typer) -> None:
    app.command("run-instance", context_settings={"ignore_unknown_options": True})(run_instance)
    app.add_typer(deploy_app, name="deploy")
