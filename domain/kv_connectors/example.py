"""Example (vLLM's ExampleConnector): the prefill writes KV files into a directory the decode
reads, so both must see one filesystem; routed by the proxy in NIXL's shape."""

from __future__ import annotations

from typing import Any

from domain.kv_connectors.base import InstanceKv, KvConnectorBackend
from domain.modes import Connector


class Example(KvConnectorBackend):
    connector = Connector.EXAMPLE.value
    label = "Example"
    shared_filesystem = True

    def extra_config(self, inst: InstanceKv) -> dict[str, Any]:
        # One absolute path both see (a relative one would land in the launcher's working
        # directory); the operator's own wins.
        return {"shared_storage_path": f"/tmp/pdctl-kv-{inst.deployment}", **inst.extra}


EXAMPLE = Example()
