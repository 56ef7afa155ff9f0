"""Every float flag of every verb refuses inf and nan, naming the flag (exit 2): click reads
both as floats, and `pdctl move --drain-timeout inf` became a socket timeout that raised a
traceback, `pdctl kv --link-gbps inf` a transfer of 0.0 ms (issue 39). Done once, over the
verbs as registered (typer's public `registered_commands` and `registered_groups`), so a
float flag added later is covered too. A flag meant to take inf is a string its verb parses
(`pdctl bench --request-rate inf`)."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Annotated, Any, get_args, get_origin, get_type_hints

import typer
from typer.models import OptionInfo


def refuse_non_finite(app: typer.Typer) -> None:
    for info in app.registered_commands:
        if info.callback is not None:
            info.callback = _checked(info.callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            refuse_non_finite(group.typer_instance)


def _checked(verb: Callable[..., Any]) -> Callable[..., Any]:
    flags = _float_flags(verb)
    if not flags:
        return verb

    @functools.wraps(verb)  # typer reads the signature through __wrapped__
    def checked(*args: Any, **kwargs: Any) -> Any:
        for name, flag in flags.items():
            value = kwargs.get(name)
            for v in value if isinstance(value, list | tuple) else [value]:
                if isinstance(v, float) and not math.isfinite(v):
                    raise typer.BadParameter(f"{v} is not a finite number", param_hint=flag)
        return verb(*args, **kwargs)

    return checked


def _float_flags(verb: Callable[..., Any]) -> dict[str, str]:
    """Each float parameter of `verb` (float, float | None, list[float]) with its flag."""
    hints = get_type_hints(verb, include_extras=True)
    out = {}
    for name, param in inspect.signature(verb).parameters.items():
        hint = hints.get(name)
        option = param.default if isinstance(param.default, OptionInfo) else None
        if get_origin(hint) is Annotated:
            hint, *extras = get_args(hint)
            option = next((e for e in extras if isinstance(e, OptionInfo)), option)
        if _is_float(hint):
            decls = [d for d in (option.param_decls or ()) if d.startswith("--")] if option else []
            out[name] = decls[0] if decls else "--" + name.replace("_", "-")
    return out


def _is_float(hint: Any) -> bool:
    if hint is float:
        return True
    return any(_is_float(arg) for arg in get_args(hint))
