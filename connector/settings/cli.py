"""How a setting meets the world beyond Python (connector/settings/): `Cli`, the mark a field
of ProxySettings carries when it is not a plain `--field-name` flag."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic.fields import FieldInfo


@dataclass(frozen=True, slots=True)
class Cli:
    """How a field meets the world beyond Python: a flag (`--field-name`, `hidden` from
    --help) or none, whether PDCTL_<FIELD_NAME> sets it when the flag is not given, and
    whether a list is one JSON text rather than a repeated flag."""

    flag: bool = True
    hidden: bool = False
    env: bool = False
    json: bool = False


def cli_of(field: FieldInfo) -> Cli:
    return next((m for m in field.metadata if isinstance(m, Cli)), Cli())
