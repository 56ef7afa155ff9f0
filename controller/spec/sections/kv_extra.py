"""The spec's `kv_connector_extra_config`: the connector settings an operator may add to the
--kv-transfer-config pdctl renders, for the whole deployment and per group (a group's keys
win for its instances; e.g. ExampleConnector's shared_storage_path or NIXL's backends)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import Field, StringConstraints

from controller.spec.field_error import FieldError

KvExtraKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
KvExtraValue = (
    Annotated[str, StringConstraints(max_length=4096)]
    | Annotated[int, Field(ge=-(1 << 63), le=(1 << 63) - 1)]
    | float  # finite: allow_inf_nan is off for every model here
    | bool
    | list[Annotated[str, StringConstraints(max_length=4096)]]
)
KvExtra = Annotated[dict[KvExtraKey, KvExtraValue], Field(max_length=32)]
# Connector settings whose key says they name code to import (kv_connector_module_path,
# spec_module_path, cache_policy_module_path, *_cls, *_class, plugins): refused.
CODE_KEY_WORDS = ("module", "plugin", "class", "cls")


def check_keys(where: tuple, keys: Iterable[str], owned: frozenset[str]) -> None:
    """Refuse, at the key, settings that load code and the connector's settings pdctl renders
    itself (`owned`: its backend's, e.g. MoRIIO's ports, registry and mode)."""
    for key in keys:
        if code := next((w for w in CODE_KEY_WORDS if w in key.lower()), None):
            raise FieldError(
                (*where, key),
                f"{key} names code to load ({code!r}: a module, plugin or class) and is refused",
            )
        if key in owned:
            raise FieldError(
                (*where, key), f"{key} is set by pdctl from the deployment's ports and modes"
            )
