"""pdctl: the one command-line door. Each verb lives in its package's `cli` module."""

from __future__ import annotations

import importlib
import sys

import typer

app = typer.Typer(
    name="pdctl",
    help="Control and observe prefill/decode disaggregated vLLM serving.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

# The modules whose `register(app)` adds verbs, in the order `pdctl --help` lists them.
VERB_MODULES = (
    "simulator.cli",
    "simulator.plan.cli",
    "connector.cli",
    "bench.cli",
    "controller.cli",
    "web.cli",
    "terminal.verbs.cli",
    "terminal.top.cli",
)


class MissingVerbs(RuntimeError):
    """A verb module is not there: a broken install, never a reason to drop verbs quietly."""


def _register(target: typer.Typer, modules: tuple[str, ...] | None = None) -> None:
    for name in VERB_MODULES if modules is None else modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise MissingVerbs(
                f"pdctl: the verbs of {name} cannot be loaded ({exc}); reinstall pdctl"
            ) from None
        module.register(target)


def main() -> None:
    try:
        _register(app)
    except MissingVerbs as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None
    from simulator.plan.calibration.cli import use_deployment_caller
    from terminal.finite_flags import refuse_non_finite
    from terminal.verbs.calibrate_target import calibrate_deployment

    use_deployment_caller(calibrate_deployment)  # the simulator's verb asks through the API

    refuse_non_finite(app)  # inf and nan refused by every float flag, naming it
    app()


if __name__ == "__main__":
    main()
