"""What every operator verb shares: the `--server` and `--json` options, the client built
from them (terminal/config.py), and the one place a failure becomes one line on stderr,
`pdctl VERB: error: ...`, with its documented exit code (terminal/exits.py)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer

from domain.names import did_you_mean
from terminal import exits
from terminal.client import ApiClient, ApiError
from terminal.config import ConfigProblem, resolve
from terminal.specs.files import SpecFileError

P = ParamSpec("P")
R = TypeVar("R")

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="The control plane (default: PDCTL_SERVER, the config file's, "
        "http://127.0.0.1:8000); the token comes from PDCTL_TOKEN or the 0600 config file.",
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the API's JSON instead of a table.")
]
ReasonOption = Annotated[
    str | None, typer.Option("--reason", help="Why: recorded with the change and its event.")
]


class Usage(RuntimeError):
    """A flag or argument the verb refuses before anything is sent (exit 2)."""


def one_of(flag: str, given: str, choices: tuple[str, ...]) -> Usage:
    """`--strategy 'rol': one of roll, hold, recreate (did you mean 'roll'?)`."""
    return Usage(f"{flag} {given!r}: one of {', '.join(choices)}{did_you_mean(given, choices)}")


def client(server: str | None) -> ApiClient:
    return ApiClient(resolve(server))


def show_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


def fail(verb: str, message: str, code: int) -> NoReturn:
    typer.echo(f"pdctl {verb}: error: {message}", err=True)
    raise typer.Exit(code)


def guarded(verb: str, fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` with every expected failure as one line and its exit code (never a traceback)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ApiError as exc:
            fail(verb, exc.message, exc.code)
        except (ConfigProblem, SpecFileError, Usage) as exc:
            fail(verb, str(exc), exits.USAGE)
        except KeyboardInterrupt:
            typer.echo(f"pdctl {verb}: interrupted", err=True)
            raise typer.Exit(exits.INTERRUPTED) from None

    return run


def command(app: typer.Typer, verb: str, fn: Callable[..., Any], group: str | None = None) -> None:
    """Register `fn` as `pdctl VERB` (or `pdctl GROUP VERB` on the group's app), guarded,
    with the exit codes in its --help."""
    said = f"{group} {verb}" if group else verb
    app.command(verb, epilog=exits.EPILOG)(guarded(said, fn))
