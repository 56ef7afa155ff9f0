"""The proxy's settings read from the environment (connector/settings/): each field marked
`Cli(env=True)` is also PDCTL_<FIELD_NAME>, so secrets and hand-overs stay out of argv; the
command line's values win over the environment's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import create_model
from pydantic_settings import BaseSettings, SettingsConfigDict

from connector.settings.cli import cli_of
from connector.settings.proxy import ProxySettings

ENV_PREFIX = "PDCTL_"


class _Environment(BaseSettings):
    # Click's rule, kept: an empty variable counts as unset.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, frozen=True)


# The fields read from the environment, as text: ProxySettings parses them like a flag's.
_ENV_FIELDS: dict[str, Any] = {
    name: (str | None, None)
    for name, field in ProxySettings.model_fields.items()
    if cli_of(field).env
}
ProxyEnvironment = create_model("ProxyEnvironment", __base__=_Environment, **_ENV_FIELDS)


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def read_settings(given: Mapping[str, Any]) -> ProxySettings:
    """The settings from `given` (the command line's values) over the environment's."""
    environment = ProxyEnvironment().model_dump(exclude_none=True)
    return ProxySettings(**{**environment, **given})
