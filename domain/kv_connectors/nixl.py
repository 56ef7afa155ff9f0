"""NIXL (vLLM's NixlConnector): every instance kv_both, the decode pulls what the prefill's
returned kv_transfer_params name, over a side channel set by environment (PROTOCOL.md 1, 3)."""

from __future__ import annotations

from typing import Any

from domain.kv_connectors.base import InstanceKv, KvConnectorBackend
from domain.modes import Connector

# vLLM 0.32's help strings (tests/fixtures/vllm/decode_metrics.txt).
METRIC_HELP = {
    "xfer_time_seconds": "Histogram of transfer duration for NIXL KV Cache transfers.",
    "post_time_seconds": "Histogram of transfer post time for NIXL KV Cache transfers.",
    "bytes_transferred": "Histogram of bytes transferred per NIXL KV Cache transfers.",
    "num_descriptors": "Histogram of number of descriptors per NIXL  KV Cache transfers.",
    "num_failed_transfers": "Number of failed NIXL KV Cache transfers, including "
    "handshake and notification failures. NOTE: KV expiry is tracked separately in "
    "vllm:nixl_num_kv_expired_reqs.",
    "num_failed_notifications": "Number of failed NIXL KV Cache notifications. Retained "
    "for compatibility; these failures are also included in vllm:nixl_num_failed_transfers.",
    "num_kv_expired_reqs": "Number of requests that had their KV expire. NOTE: This "
    "metric is tracked on the P instance.",
    "num_notifications_after_expiry": "Number of completion notifications for requests "
    "that were no longer tracked, usually because their KV lease expired. The KV blocks "
    "may have been reused before the transfer finished. Counted per notification (one "
    "per remote rank), not per request.",
}


class Nixl(KvConnectorBackend):
    connector = Connector.NIXL.value
    label = "NIXL"
    proxy_name = "nixl"
    bidirectional_kv = True  # bidirectional_kv_xfer (PROTOCOL.md 4b)
    role_switch = True  # its instances run kv_both, so pd_role can move them
    kv_ports = frozenset({"side_channel"})
    metric_prefix = "nixl"
    metric_help = METRIC_HELP

    def kv_transfer_config(self, inst: InstanceKv) -> dict[str, Any]:
        # NIXL ignores kv_role (the proxy decides who prefills): kv_both for everyone.
        # On a CPU-only host vLLM's kv_buffer_device defaults to "cpu" (the platform's).
        config: dict[str, Any] = {"kv_connector": self.connector, "kv_role": "kv_both"}
        if inst.extra:
            config["kv_connector_extra_config"] = dict(inst.extra)
        return config

    def kv_env(self, inst: InstanceKv) -> dict[str, str]:
        if inst.ports.side_channel is None:
            return {}
        env = {}
        if inst.node_address:  # on a cluster node: the side channel listens there
            env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = inst.node_address
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(inst.ports.side_channel)
        return env


NIXL = Nixl()
