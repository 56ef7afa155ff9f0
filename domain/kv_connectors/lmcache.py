"""LMCache (vLLM's LMCacheConnectorV1): rendered only, a producer on prefill and a consumer on
decode with its own settings left to its defaults or to kv_connector_extra_config."""

from __future__ import annotations

from domain.kv_connectors.base import KvConnectorBackend
from domain.modes import Connector


class LmCache(KvConnectorBackend):
    connector = Connector.LMCACHE.value
    label = "LMCache"


LMCACHE = LmCache()
