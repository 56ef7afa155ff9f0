"""What every KV connector answers, and the defaults: a connector pdctl renders by name (a
producer on prefill, a consumer on decode) whose requests the proxy routes in NIXL's shape."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from domain.modes import Mode, Role

# The proxy's hand-off for a connector it does not speak by name: the prefill returns
# kv_transfer_params naming its KV and the proxy relays them to the decode, in read mode.
RELAY_PROXY = "nixl"
# vLLM's abort timeout for KV nobody took (VLLM_NIXL_ABORT_REQUEST_TIMEOUT's default).
KV_HOLD_TIMEOUT_S = 480.0


@dataclass(frozen=True, slots=True)
class KvPorts:
    """An instance's ports a connector may need besides HTTP (controller's InstancePorts)."""

    http: int | None = None
    handshake: int | None = None  # per-rank base
    notify: int | None = None  # per-rank base
    side_channel: int | None = None


@dataclass(frozen=True, slots=True)
class InstanceKv:
    """What a backend renders one instance's kv-transfer-config and env from."""

    role: Role
    deployment: str = ""
    mode: Mode | None = None  # its group's, for connectors with modes
    ports: KvPorts = KvPorts()
    proxy_ip: str = "127.0.0.1"  # where the proxy's registry listens
    registry_port: int = 36367
    node_address: str | None = None  # its node's, when placed on a cluster
    extra: Mapping[str, Any] = field(default_factory=dict)  # the spec's extra config


class LegPeer(Protocol):
    """One side of a hand-off as the proxy knows it (connector/legs/rewrite.py's Peer)."""

    @property
    def zmq_address(self) -> str | None: ...
    @property
    def dp_size(self) -> int: ...
    @property
    def tp_size(self) -> int: ...


class Legs(Protocol):
    """One request's hand-off identity, shared by both legs (connector/legs/rewrite.py)."""

    @property
    def mode(self) -> str: ...
    @property
    def request_hex(self) -> str: ...
    @property
    def transfer_id(self) -> str: ...
    @property
    def prefill(self) -> LegPeer: ...
    @property
    def decode(self) -> LegPeer: ...
    @property
    def prefill_dp_rank(self) -> int | None: ...


class KvConnectorBackend:
    """One KV connector's facts and rules. Subclasses override what differs; instances are
    registered in domain/kv_connectors/registry.py and asked by every floor above."""

    connector: str = ""  # vLLM's class name, domain/modes.py's Connector
    label: str = "a vLLM connector"  # what people call it, in messages
    proxy_name: str | None = None  # what `pdctl proxy --connector` takes; None: rendered only

    # Modes and features, each refused elsewhere with a message naming who has it.
    has_modes: bool = False  # instances run a read or write mode fixed at start
    bidirectional_kv: bool = False  # a decode's blocks kept for the next turn's prefill
    role_switch: bool = False  # kv_both instances moved between prefill and decode at run time
    registers: bool = False  # instances register with the proxy's ZMQ registry
    prefix_caching_off: str | None = None  # why it runs without prefix caching, if it does
    amd_only: bool = False  # its instances pick GPUs by HIP_VISIBLE_DEVICES
    rocm_devices: tuple[str, ...] = ()  # device files its containers need beyond the GPUs'
    shared_filesystem: bool = False  # hands KV over a directory both instances see
    owned_extra_keys: frozenset[str] = frozenset()  # extra-config keys pdctl renders itself
    kv_ports: frozenset[str] = frozenset()  # of KvPorts: handshake, notify, side_channel

    # The proxy's legs (connector/legs/).
    decode_retry_alone: bool = True  # a refused decode is retried with the same prefill's KV

    # The stand-in and the hand-off model (simulator/).
    transfer_id: bool = False  # legs carry a proxy-minted transfer_id, not the prefill's params
    metric_prefix: str | None = None  # its engines export vllm:<prefix>_* transfer metrics
    metric_help: Mapping[str, str] = {}  # their help strings, as vLLM writes them
    metrics_optional: bool = False  # older releases export none of them
    kv_hold_timeout_s: float = KV_HOLD_TIMEOUT_S  # a prefill's KV nobody took is freed then
    merges_blocks: bool = False  # one transfer descriptor per layer region, not per block
    rdma_in_node: bool = False  # takes the NICs whenever there are, even inside a node

    @property
    def routed_as(self) -> str:
        """The `--connector` the proxy in front of it is started with."""
        return self.proxy_name or RELAY_PROXY

    def kv_transfer_config(self, inst: InstanceKv) -> dict[str, Any]:
        """The --kv-transfer-config of one prefill or decode instance."""
        config: dict[str, Any] = {
            "kv_connector": self.connector,
            "kv_role": "kv_producer" if inst.role == Role.PREFILL else "kv_consumer",
        }
        extra = self.extra_config(inst)
        if extra:
            config["kv_connector_extra_config"] = extra
        return config

    def extra_config(self, inst: InstanceKv) -> dict[str, Any]:
        """kv_connector_extra_config: the operator's own settings unless a connector adds."""
        return dict(inst.extra)

    def kv_env(self, inst: InstanceKv) -> dict[str, str]:
        """Environment an instance needs besides its config."""
        return {}

    def request_id(self, legs: Legs) -> str:
        """The X-Request-Id both legs carry."""
        return legs.request_hex

    def prefill_params(
        self, params: dict[str, Any], legs: Legs, pull: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The prefill leg's kv_transfer_params: `params` (do_remote_decode; a dict built for
        this leg, which a backend may extend), or `pull`, an earlier turn's blocks to pull
        back (bidirectional KV)."""
        return pull if pull is not None else params

    def decode_params(
        self, legs: Legs, prefill_params: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """The decode leg's kv_transfer_params (None: the client's body has none): the
        prefill's returned ones, relayed."""
        return prefill_params or None
