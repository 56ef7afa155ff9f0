"""MoRIIO (vLLM's MoRIIOConnector): producer and consumer in a read or write mode fixed at
start, registered with the proxy's ZMQ registry, one proxy-minted transfer_id per request,
the peers' addresses in X-Request-Id (PROTOCOL.md 1-3)."""

from __future__ import annotations

from typing import Any

from domain.kv_connectors.base import InstanceKv, KvConnectorBackend, Legs
from domain.modes import Connector, Mode, Role

# The prefill's returned kv_transfer_params a decode is given (read mode).
COPY_FROM_PREFILL = (
    "remote_engine_id",
    "remote_block_ids",
    "remote_host",
    "remote_handshake_port",
    "remote_notify_port",
    "tp_size",
)
# kv_connector_extra_config keys pdctl renders itself (its ports, registry, mode).
OWNED_KEYS = frozenset(
    {
        "proxy_ip",
        "proxy_ping_port",
        "http_port",
        "handshake_port",
        "notify_port",
        "read_mode",
        "host_ip",
    }
)
# Newer vLLM's moriio/stats.py (tests/simulator/test_moriio_metrics.py names its commit).
METRIC_HELP = {
    "xfer_time_seconds": "Histogram of transfer duration for MoRI IO KV Cache transfers.",
    "post_time_seconds": "Histogram of transfer post time for MoRI IO KV Cache transfers.",
    "bytes_transferred": "Histogram of bytes transferred per MoRI IO KV Cache transfers.",
    "num_descriptors": "Histogram of number of descriptors per MoRI IO KV Cache transfers.",
    "num_failed_transfers": "Number of failed MoRI IO KV Cache transfers.",
    "num_failed_notifications": "Number of failed MoRI IO KV Cache notifications.",
    "num_kv_expired_reqs": "Number of requests that had their KV expire. NOTE: This "
    "metric is tracked on the P instance.",
}


def moriio_request_id(prefill_zmq: str, decode_zmq: str, hex32: str) -> str:
    """The X-Request-Id MoRIIO parses the peer's side-channel address from."""
    return f"___prefill_addr_{prefill_zmq}___decode_addr_{decode_zmq}_{hex32}"


class Moriio(KvConnectorBackend):
    connector = Connector.MORIIO.value
    label = "MoRIIO"
    proxy_name = "moriio"
    has_modes = True
    registers = True
    prefix_caching_off = "every published MORI-IO setup uses --no-enable-prefix-caching"
    amd_only = True
    rocm_devices = ("/dev/infiniband",)  # KV over the NIC (MORI_DISABLE_AUTO_XGMI=1)
    owned_extra_keys = OWNED_KEYS
    kv_ports = frozenset({"handshake", "notify"})  # bases: one port per TP rank
    # The prefill's X-Request-Id names the decode it hands KV to: a new pair, a new transfer.
    decode_retry_alone = False
    transfer_id = True
    metric_prefix = "moriio"
    metric_help = METRIC_HELP
    metrics_optional = True  # older MoRIIO (the blog's vLLM 0.16) exports none
    kv_hold_timeout_s = 3600.0
    merges_blocks = True  # moriio_connector.py merge_contiguous_blocks
    rdma_in_node = True  # its default backend is RDMA; XGMI only when the config says so

    def kv_transfer_config(self, inst: InstanceKv) -> dict[str, Any]:
        """Producer or consumer with the proxy's registry address and the instance's ports;
        the mode in `read_mode` (vLLM 0.32 reads only this; older ones the env of kv_env)."""
        ports = inst.ports
        if not (ports.http and ports.handshake and ports.notify):
            raise ValueError("a MoRIIO instance needs http, handshake and notify ports")
        if inst.role == Role.COLOCATED:
            raise ValueError("MoRIIO instances are either prefill (producer) or decode (consumer)")
        extra: dict[str, Any] = {
            "proxy_ip": inst.proxy_ip,
            "proxy_ping_port": str(inst.registry_port),
            "http_port": str(ports.http),
            "handshake_port": str(ports.handshake),
            "notify_port": str(ports.notify),
            "read_mode": "true" if (inst.mode or Mode.READ) == Mode.READ else "false",
        }
        extra.update(inst.extra)
        if inst.node_address:  # what it advertises for its handshake and notify ports
            extra["host_ip"] = inst.node_address
        return {
            "kv_connector": self.connector,
            "kv_role": "kv_producer" if inst.role == Role.PREFILL else "kv_consumer",
            "kv_connector_extra_config": extra,
        }

    def kv_env(self, inst: InstanceKv) -> dict[str, str]:
        # vLLM 0.32 reads read_mode from the config; older vLLM (the blog's 0.16) only this.
        if inst.mode is None:
            return {}
        return {"VLLM_MORIIO_CONNECTOR_READ_MODE": "1" if inst.mode == Mode.READ else "0"}

    def request_id(self, legs: Legs) -> str:
        if legs.prefill.zmq_address and legs.decode.zmq_address:
            return moriio_request_id(
                legs.prefill.zmq_address, legs.decode.zmq_address, legs.request_hex
            )
        return legs.request_hex

    def prefill_params(
        self, params: dict[str, Any], legs: Legs, pull: dict[str, Any] | None
    ) -> dict[str, Any]:
        params["transfer_id"] = legs.transfer_id  # `params` is this leg's own: no copy
        params["remote_dp_size"] = legs.decode.dp_size
        params["remote_tp_size"] = legs.decode.tp_size
        return params

    def decode_params(
        self, legs: Legs, prefill_params: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        if legs.mode == "read" and not prefill_params:  # a str: Mode's value, compared fast
            return None  # the prefill handed nothing over: the decode computes it all
        params: dict[str, Any] = {
            "do_remote_decode": False,
            "do_remote_prefill": True,
            "transfer_id": legs.transfer_id,
            "remote_dp_size": legs.prefill.dp_size,
            "remote_tp_size": legs.prefill.tp_size,
        }
        if legs.prefill.dp_size > 1 and legs.prefill_dp_rank is not None:
            params["remote_dp_rank"] = legs.prefill_dp_rank
        if prefill_params:
            for key in COPY_FROM_PREFILL:
                if key in prefill_params:
                    params[key] = prefill_params[key]
        return params


MORIIO = Moriio()
