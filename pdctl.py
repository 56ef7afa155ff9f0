"""pdctl: the one command-line door. Each verb lives in its package's `cli` module."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="pdctl",
    help="Control and observe prefill/decode disaggregated vLLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from simulator import cli as sim_cli

    sim_cli.register(app)
    for name in ("simulator.plan_cli", "connector.cli", "bench.cli", "controller.cli", "web.cli"):
        try:
            module = __import__(name, fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(app)


def main() -> None:
    _register()
    app()


if __name__ == "__main__":
    main()
