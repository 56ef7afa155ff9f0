"""One backend per KV connector: what pdctl renders for it (kv-transfer-config, env, ports),
whether it has modes, bidirectional KV, run-time role switching, how the proxy's legs carry
its hand-off, and how the stand-in models it. Everything else asks these, never a name.

Rooms: `base` (the backend class, its defaults and the records it reads), one module per
connector (`nixl`, `moriio`, `example`, `mooncake`, `lmcache`, `p2p_nccl`), `registry`.
Pure: no I/O.
"""

from domain.kv_connectors.base import InstanceKv, KvConnectorBackend, KvPorts, LegPeer, Legs
from domain.kv_connectors.registry import (
    UnknownConnector,
    all_backends,
    backend_for,
    by_metric_prefix,
    lookup,
    metric_prefixes,
    names,
    offering,
    proxy_backend,
    proxy_names,
    register,
    stand_in_backend,
    unregister,
)

__all__ = [
    "InstanceKv",
    "KvConnectorBackend",
    "KvPorts",
    "LegPeer",
    "Legs",
    "UnknownConnector",
    "all_backends",
    "backend_for",
    "by_metric_prefix",
    "lookup",
    "metric_prefixes",
    "names",
    "offering",
    "proxy_backend",
    "proxy_names",
    "register",
    "stand_in_backend",
    "unregister",
]
