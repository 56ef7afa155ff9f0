"""P2pNccl (vLLM's P2pNcclConnector): rendered only, a producer on prefill and a consumer on
decode with its own settings left to its defaults or to kv_connector_extra_config."""

from __future__ import annotations

from domain.kv_connectors.base import KvConnectorBackend
from domain.modes import Connector


class P2pNccl(KvConnectorBackend):
    connector = Connector.P2P_NCCL.value
    label = "P2pNccl"


P2P_NCCL = P2pNccl()
