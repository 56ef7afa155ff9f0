"""The registry: each connector's backend by vLLM's name, by the proxy's name and by metric
prefix. A new connector is one module whose backend is registered here (or by `register`)."""

from __future__ import annotations

from domain.kv_connectors.base import KvConnectorBackend
from domain.kv_connectors.example import EXAMPLE
from domain.kv_connectors.lmcache import LMCACHE
from domain.kv_connectors.mooncake import MOONCAKE
from domain.kv_connectors.moriio import MORIIO
from domain.kv_connectors.nixl import NIXL
from domain.kv_connectors.p2p_nccl import P2P_NCCL

# By vLLM's class name, in the order choices are listed (the default, NIXL, first).
_BACKENDS: dict[str, KvConnectorBackend] = {
    b.connector: b for b in (NIXL, MORIIO, MOONCAKE, LMCACHE, P2P_NCCL, EXAMPLE)
}
# By the proxy's name: the legs ask on every request.
_BY_PROXY_NAME = {b.proxy_name: b for b in _BACKENDS.values() if b.proxy_name}
# A vLLM connector pdctl has no backend for, as the stand-in plays it: the defaults.
UNLISTED = KvConnectorBackend()


class UnknownConnector(ValueError):
    """A connector name no backend answers for; the message lists the known ones."""

    def __init__(self, name: object, known: tuple[str, ...]) -> None:
        super().__init__(f"unknown connector {name!r}; known: {', '.join(known)}")
        self.name = name


def register(backend: KvConnectorBackend) -> KvConnectorBackend:
    """Add (or replace) the backend of `backend.connector`."""
    if not backend.connector:
        raise ValueError("a backend names its connector (vLLM's class name)")
    unregister(backend.connector)
    _BACKENDS[backend.connector] = backend
    if backend.proxy_name:
        _BY_PROXY_NAME[backend.proxy_name] = backend
    return backend


def unregister(connector: str) -> None:
    backend = _BACKENDS.pop(connector, None)
    if backend is not None and backend.proxy_name:
        _BY_PROXY_NAME.pop(backend.proxy_name, None)


def all_backends() -> tuple[KvConnectorBackend, ...]:
    return tuple(_BACKENDS.values())


def names() -> tuple[str, ...]:
    """vLLM's class names of every connector pdctl renders."""
    return tuple(_BACKENDS)


def lookup(connector: str | None) -> KvConnectorBackend | None:
    """The backend of a vLLM connector name; None for none, or a name no backend has."""
    return _BACKENDS.get(connector) if connector is not None else None


def backend_for(connector: str) -> KvConnectorBackend:
    """The backend of a vLLM connector name; UnknownConnector for any other."""
    backend = lookup(connector)
    if backend is None:
        raise UnknownConnector(connector, names())
    return backend


def stand_in_backend(connector: str) -> KvConnectorBackend:
    """What the stand-in plays a connector by: its backend, else the defaults."""
    return _BACKENDS.get(connector, UNLISTED)


def proxy_names() -> tuple[str, ...]:
    """What `pdctl proxy --connector` takes: the connectors the proxy speaks by name."""
    return tuple(b.proxy_name for b in _BACKENDS.values() if b.proxy_name)


def proxy_backend(name: str) -> KvConnectorBackend:
    """The backend of a `pdctl proxy --connector` name; UnknownConnector for any other."""
    backend = _BY_PROXY_NAME.get(name)
    if backend is None:
        raise UnknownConnector(name, proxy_names())
    return backend


def metric_prefixes() -> tuple[str, ...]:
    """The vllm:<prefix>_* transfer-metric prefixes engines may export."""
    return tuple(b.metric_prefix for b in _BACKENDS.values() if b.metric_prefix)


def by_metric_prefix(prefix: str) -> KvConnectorBackend | None:
    return next((b for b in _BACKENDS.values() if b.metric_prefix == prefix), None)


def offering(fact: str) -> tuple[KvConnectorBackend, ...]:
    """The backends for which `fact` (an attribute) holds, for messages naming them."""
    return tuple(b for b in _BACKENDS.values() if getattr(b, fact))
