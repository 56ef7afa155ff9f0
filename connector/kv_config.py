"""Pure: the `--kv-transfer-config` JSON (and env) an instance needs, per connector and role.

Used by the controller to render `vllm serve` and `pdctl sim` commands (PROTOCOL.md section 1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from domain.modes import Role, parse_role


@dataclass(frozen=True, slots=True)
class MoriioPorts:
    http_port: int
    handshake_port: int
    notify_port: int
    proxy_ip: str = "127.0.0.1"
    proxy_ping_port: int = 36367


def kv_transfer_config(
    connector: str,
    role: str,
    *,
    mode: str = "read",
    moriio: MoriioPorts | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The kv-transfer-config dict for one instance.

    NIXL: kv_both for everyone (the proxy decides who prefills). MoRIIO: producer/consumer with
    the proxy's registry address and the instance's ports; the mode goes in `read_mode` (vLLM
    0.32 reads only this; older versions read the env var from `kv_env`).
    """
    role = parse_role(role)  # raises naming the roles; "both" is an older colocated
    if connector == "nixl":
        config: dict[str, Any] = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        if extra:
            config["kv_connector_extra_config"] = dict(extra)
        return config
    if connector != "moriio":
        raise ValueError(f"unknown connector {connector!r}; expected nixl or moriio")
    if moriio is None:
        raise ValueError("MoRIIO needs the instance's ports (MoriioPorts)")
    if role == Role.COLOCATED:
        raise ValueError("MoRIIO instances are either prefill (producer) or decode (consumer)")
    extra_config: dict[str, Any] = {
        "proxy_ip": moriio.proxy_ip,
        "proxy_ping_port": str(moriio.proxy_ping_port),
        "http_port": str(moriio.http_port),
        "handshake_port": str(moriio.handshake_port),
        "notify_port": str(moriio.notify_port),
        "read_mode": "true" if mode == "read" else "false",
    }
    extra_config.update(extra or {})
    return {
        "kv_connector": "MoRIIOConnector",
        "kv_role": "kv_producer" if role == Role.PREFILL else "kv_consumer",
        "kv_connector_extra_config": extra_config,
    }


def kv_env(connector: str, mode: str = "read") -> dict[str, str]:
    """Environment an instance needs besides the config (older MoRIIO reads the mode here)."""
    if connector == "moriio":
        return {"VLLM_MORIIO_CONNECTOR_READ_MODE": "1" if mode == "read" else "0"}
    return {}


def kv_transfer_config_json(connector: str, role: str, **kwargs: Any) -> str:
    return json.dumps(kv_transfer_config(connector, role, **kwargs), separators=(",", ":"))
