"""Mooncake (vLLM's MooncakeConnector): rendered only, a producer on prefill and a consumer on
decode with its own settings left to its defaults or to kv_connector_extra_config."""

from __future__ import annotations

from domain.kv_connectors.base import KvConnectorBackend
from domain.modes import Connector


class Mooncake(KvConnectorBackend):
    connector = Connector.MOONCAKE.value
    label = "Mooncake"


MOONCAKE = Mooncake()
