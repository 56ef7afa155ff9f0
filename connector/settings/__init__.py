"""The proxy's settings, declared once: `pdctl proxy`'s flags (connector/flags.py), a spec's
proxy section (controller/spec/deployment.py) and the rendered command line all come from here.

Each field is `--field-name` on the command line, with its type, default, bounds and help
(`description`). Fields marked `Cli(env=True)` are also read from `PDCTL_<FIELD_NAME>`
(`read_settings`), so secrets and hand-overs stay out of argv; a `Cli(flag=False)` field has
no flag at all. Rules between fields are checked by one model validator, each naming the
field it is about (`ProxySettings.conflict`).

The room: `proxy` (the ProxySettings model), `fields` (the types a spec's proxy section shares),
`parsing` (how their text is read), `cli` (the flag and environment marks) and `environment`
(reading PDCTL_* and the command line together).
"""

from connector.settings.cli import Cli, cli_of
from connector.settings.environment import ENV_PREFIX, ProxyEnvironment, env_name, read_settings
from connector.settings.fields import (
    FIRST_BYTE_TIMEOUT_S,
    DecodeTimeout,
    EjectMaxShare,
    FirstByteTimeout,
    HoldDeadline,
    HoldQueue,
    Instances,
    InstanceUrl,
    Policy,
    PrefillTimeout,
    RetryAttempts,
    RetryBudgetRatio,
    RetryDeadline,
    SloMs,
)
from connector.settings.parsing import FlagInstance
from connector.settings.proxy import ProxySettings

__all__ = [
    "ENV_PREFIX",
    "FIRST_BYTE_TIMEOUT_S",
    "Cli",
    "DecodeTimeout",
    "EjectMaxShare",
    "FirstByteTimeout",
    "FlagInstance",
    "HoldDeadline",
    "HoldQueue",
    "InstanceUrl",
    "Instances",
    "Policy",
    "PrefillTimeout",
    "ProxyEnvironment",
    "ProxySettings",
    "RetryAttempts",
    "RetryBudgetRatio",
    "RetryDeadline",
    "SloMs",
    "cli_of",
    "env_name",
    "read_settings",
]
