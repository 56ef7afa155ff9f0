"""The proxy's settings as flags, both ways: typer options generated from ProxySettings' fields
(`command`), and the argv that gives a ProxySettings (`argv`, what the controller launches)."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import typer
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from connector.settings import ProxySettings, cli_of, env_name, read_settings

SCALARS = (int, float, bool, str, Path)


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def command(run: Callable[[ProxySettings], None]) -> Callable[..., None]:
    """A typer command with one option per flagged field, that validates what it was given
    (over the environment) into ProxySettings and runs `run` with them. A value the model
    refuses exits 2 naming its flag."""

    def parsed(**values: Any) -> None:
        # An option not given is None (or no item): the model's default, or the environment's.
        given = {
            k: tuple(v) if isinstance(v, list | tuple) else v
            for k, v in values.items()
            if v is not None and v != [] and v != ()
        }
        try:
            settings = read_settings(given)
        except ValidationError as exc:
            raise bad_parameter(exc.errors()[0]) from None
        run(settings)

    parsed.__name__, parsed.__doc__ = run.__name__, run.__doc__
    parsed.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # typer reads it
        [
            _option(name, field)
            for name, field in ProxySettings.model_fields.items()
            if cli_of(field).flag
        ]
    )
    return parsed


def _option(name: str, field: FieldInfo) -> inspect.Parameter:
    cli = cli_of(field)
    kind: Any
    kind, repeated = (str, False) if cli.json else _cli_type(field.annotation)
    decls = [f"{flag(name)}/--no-{flag(name)[2:]}"] if kind is bool else [flag(name)]
    option = typer.Option(*decls, help=field.description, hidden=cli.hidden)
    default: Any = field.default
    if field.is_required():
        default = inspect.Parameter.empty
    elif repeated or cli.env or field.default is None:
        default, kind = None, (types.GenericAlias(list, kind) if repeated else kind) | None
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, option]
    )


def _cli_type(annotation: Any) -> tuple[type, bool]:
    """The type typer parses a field's text into, and whether its flag repeats. A type typer
    does not know (JSON, a Literal) stays text, which the model then parses."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
        return _cli_type(annotation)
    if get_origin(annotation) in (tuple, list):
        return str, True
    return (annotation if annotation in SCALARS else str), False


def bad_parameter(error: ErrorDetails) -> typer.BadParameter:
    """Pydantic's first error as typer's, naming the flag (and the variable of a field read
    from the environment)."""
    ctx = error.get("ctx", {})
    name = ProxySettings.error_field(error)
    message = ctx.get("message") or str(ctx.get("error") or error["msg"])
    hint = flag(name)
    if cli_of(ProxySettings.model_fields[name]).env:
        hint += f" ({env_name(name)})"
    return typer.BadParameter(message, param_hint=hint)


def argv(settings: ProxySettings) -> list[str]:
    """The flags that give `settings`: one per field set explicitly, in field order; a list
    repeats its flag, None leaves it out. Fields read from the environment never go into
    argv, which every local user can read."""
    out: list[str] = []
    dumped = settings.model_dump(mode="json", include=settings.model_fields_set)
    for name, value in dumped.items():
        cli = cli_of(ProxySettings.model_fields[name])
        if not cli.flag or cli.env or value is None:
            continue
        if isinstance(value, bool):
            out.append(flag(name) if value else f"--no-{flag(name)[2:]}")
        elif isinstance(value, list):
            for item in value:
                out += [flag(name), str(item)]
        else:
            out += [flag(name), _text(value)]
    return out


def _text(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
