"""The stand-in engine's settings, parsed from vLLM's flags and its --kv-transfer-config JSON.

Pure: no sockets, no environment reads except through the `env` mapping passed in.
"""

from __future__ import annotations

import ipaddress
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from domain import profiles
from domain.engine.frontend_cost import VLLM_API_SERVER, FrontendCost
from domain.kv_connectors import KvConnectorBackend, names, offering, stand_in_backend
from simulator.model.handoff import HandoffLink
from simulator.model.handoff_paths import P2P, choose_path, path_bandwidth

if TYPE_CHECKING:
    from simulator.config.encoder import EcSettings

# vLLM's other registered connectors, which pdctl does not render: the stand-in takes them
# too and plays them by the backends' defaults (NIXL's transport).
VLLM_ONLY_CONNECTORS = (
    "LMCacheMPConnector",
    "SharedStorageConnector",
    "MultiConnector",
    "OffloadingConnector",
    "DecodeBenchConnector",
)
KNOWN_CONNECTORS = (*names(), *VLLM_ONLY_CONNECTORS)
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
# vLLM's default side-channel host (envs.VLLM_NIXL_SIDE_CHANNEL_HOST): fine on one machine,
# wrong across machines, which is why the controller renders the node's address into it.
NIXL_DEFAULT_HOST = "localhost"
# A DNS name (RFC 1123 labels): what is left once IP literals are taken out.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")


class EngineConfigError(ValueError):
    """A flag or kv-transfer-config value the stand-in cannot run with; names the flag."""


@dataclass(frozen=True, slots=True)
class KVTransferSettings:
    """What the stand-in does with KV beyond itself (vLLM's KVTransferConfig, the part we use)."""

    connector: str = "NixlConnector"
    role: str = "kv_both"
    read_mode: bool = True  # MoRIIO only; NIXL always pulls
    kv_port: int = 5600  # NIXL side channel, or MoRIIO handshake port
    # Where the KV listeners bind and what this engine advertises to its peers: NIXL's
    # VLLM_NIXL_SIDE_CHANNEL_HOST, MoRIIO's host_ip; None: the --host address.
    host: str | None = None
    notify_port: int | None = None  # MoRIIO notify port (write mode: decode announces here)
    proxy_ip: str | None = None
    proxy_ping_port: int | None = None
    load_failure_policy: str = "fail"  # fail | recompute
    transfer_timeout_s: float = 30.0
    extra: dict[str, Any] = field(default_factory=dict)
    # Runtime P/D role switching (simulator/server/pd_role.py): the role it starts serving, or None
    pd_role: str | None = None

    @property
    def backend(self) -> KvConnectorBackend:
        """What its connector is played by (domain/kv_connectors/)."""
        return stand_in_backend(self.connector)

    @property
    def registers(self) -> bool:
        return self.proxy_ip is not None and self.proxy_ping_port is not None

    @property
    def transfer_mode(self) -> str:
        return "READ" if self.read_mode else "WRITE"


@dataclass(frozen=True, slots=True)
class EngineSettings:
    host: str = "127.0.0.1"
    port: int = 8100
    served_model_name: str = "tiny"
    model_profile: str = "tiny"
    hardware: str = "cpu"
    tensor_parallel_size: int = 1
    # vLLM's defaults for the API server on a large GPU; `pdctl sim` resolves unset flags by
    # device (domain/engine/defaults.py) and says why in `defaults_applied`.
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    num_gpu_blocks_override: int | None = None
    gpu_memory_utilization: float = 0.9
    time_scale: float = 1.0
    # The modelled start (domain/engine/start_time.py) x time_scale x this before the port opens;
    # 0: at once (tests, `make run`).
    start_time_scale: float = 0.0
    start_cache: str = "warm"  # warm: a restart on the same node; cold: its first start
    kv: KVTransferSettings | None = None
    kv_link_gbps: float | None = None  # GB/s for the modelled KV link; default from hardware
    kv_link_latency_s: float = 0.0002
    kv_wire_scale: float = 1 / 1024
    kv_hold_timeout_s: float = 480.0
    registration_interval_s: float = 3.0
    log_stats_interval_s: float | None = 10.0  # None: --disable-log-stats
    # --enable-per-request-metrics: each response's `metrics` carries its engine timing
    per_request_metrics: bool = False
    defaults_applied: str = ""  # one line per flag vLLM's defaults chose, with the rule
    fault_injection: bool = False  # POST /_fault (simulator/config/faults.py); for `make chaos`
    # A restarted prefill's stale agent at the decode: heal | hang | fail (simulator/kv/peers.py)
    kv_stale_peer: str = "heal"
    # MoRIIO's transfer metrics: stats (newer vLLM's moriio/stats.py, vllm:moriio_*) or none
    # (older MoRIIO, e.g. the blog's vLLM 0.16, exports none: pdctl derives the figure)
    moriio_metrics: str = "stats"
    engine_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    ec: EcSettings | None = None  # --ec-transfer-config (simulator/config/encoder.py)
    # What vLLM's API server spends CPU on (simulator/model/frontend_clock.py); --frontend-cost
    frontend_cost: FrontendCost = VLLM_API_SERVER
    # The model's tokenizer.json (a folder or the file; --tokenizer, or --model's folder):
    # prompts count as vLLM counts them. None: the stand-in's estimate.
    tokenizer: str | None = None

    @property
    def frontend_wall_cost(self) -> FrontendCost:
        """The frontend's cost on this machine's clock: slowed time_scale times, like the
        engine, so its CPU share at a wall rate is the modelled host's at the modelled rate."""
        return self.frontend_cost.scaled(self.time_scale)

    @property
    def transfer_metrics_prefix(self) -> str | None:
        """The vllm:<prefix>_* transfer families this engine exports (None: none)."""
        if self.kv is None:
            return None
        backend = self.kv.backend
        if backend.metrics_optional and self.moriio_metrics == "none":
            return None
        return backend.metric_prefix

    @property
    def kv_bind_host(self) -> str:
        """The address the KV side channel (and MoRIIO's notify port) listens on."""
        if self.kv is not None and self.kv.host is not None:
            return self.kv.host
        return self.host

    @property
    def kv_advertised_host(self) -> str:
        """The address peers are told to reach this engine's KV at: the configured one as
        given (vLLM sends it verbatim), else --host, a wildcard one made loopback."""
        if self.kv is not None and self.kv.host is not None:
            return self.kv.host
        return "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host

    @property
    def model_len(self) -> int:
        return self.max_model_len or profiles.model(self.model_profile).max_model_len

    def handoff_link(self, same_node: bool) -> HandoffLink:
        """The modelled hand-off from a prefill: the path this connector takes on this
        hardware (MoRIIO's backend "xgmi" is peer-to-peer), its bandwidth part one link per
        TP rank unless --kv-link-gbps says otherwise, its setup part --kv-link-latency."""
        hw = profiles.hardware(self.hardware)
        connector = self.kv.connector if self.kv is not None else "NixlConnector"
        path = choose_path(hw, connector, same_node)
        if self.kv is not None and str(self.kv.extra.get("backend", "")).lower() == "xgmi":
            path = P2P
        tp = self.tensor_parallel_size
        if self.kv_link_gbps is not None:
            bandwidth = self.kv_link_gbps * 1e9
        else:
            bandwidth = path_bandwidth(path, hw, tp, same_node)
        return HandoffLink(path, bandwidth, tp, connector, setup_s=self.kv_link_latency_s)


def parse_kv_transfer_config(
    raw: str | None, http_port: int, env: Mapping[str, str]
) -> KVTransferSettings | None:
    """Parse vLLM's --kv-transfer-config JSON; None when not given."""
    if raw is None or raw.strip() == "":
        return None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise EngineConfigError(f"--kv-transfer-config is not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise EngineConfigError("--kv-transfer-config must be a JSON object")
    connector = data.get("kv_connector")
    if connector not in KNOWN_CONNECTORS:
        raise EngineConfigError(
            f"--kv-transfer-config: unknown kv_connector {connector!r}; "
            f"known: {', '.join(KNOWN_CONNECTORS)}"
        )
    role = data.get("kv_role", "kv_both")
    if role not in KV_ROLES:
        raise EngineConfigError(f"--kv-transfer-config: kv_role must be one of {KV_ROLES}")
    extra = data.get("kv_connector_extra_config") or {}
    if not isinstance(extra, dict):
        raise EngineConfigError("--kv-transfer-config: kv_connector_extra_config must be an object")
    policy = data.get("kv_load_failure_policy", extra.get("kv_load_failure_policy", "fail"))
    if policy not in ("fail", "recompute"):
        raise EngineConfigError("--kv-transfer-config: kv_load_failure_policy: fail | recompute")
    pd_role = _pd_role(data.get("pd_role"), connector, role)
    if stand_in_backend(connector).transfer_id:  # MoRIIO's ports, registry and mode
        return _moriio(connector, extra, role, policy, http_port, env)
    side_channel = _port(
        env.get("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600"), "VLLM_NIXL_SIDE_CHANNEL_PORT"
    )
    # Every connector but MoRIIO takes NIXL's variables (the stand-in has one KV transport).
    side_host = _host(
        env.get("VLLM_NIXL_SIDE_CHANNEL_HOST", NIXL_DEFAULT_HOST), "VLLM_NIXL_SIDE_CHANNEL_HOST"
    )
    return KVTransferSettings(
        connector=connector,
        role=role,
        read_mode=True,
        kv_port=side_channel,
        host=side_host,
        load_failure_policy=policy,
        extra=extra,
        transfer_timeout_s=float(extra.get("transfer_timeout", 30.0)),
        pd_role=pd_role,
    )


def _pd_role(value: object, connector: str, kv_role: str) -> str | None:
    """Newer vLLM's pd_role: NIXL only (it pulls), on an instance that can do both."""
    if value is None:
        return None
    if value not in ("prefill", "decode"):
        raise EngineConfigError("--kv-transfer-config: pd_role must be prefill or decode")
    if not stand_in_backend(connector).role_switch or kv_role != "kv_both":
        needs = " or ".join(f'"{b.connector}"' for b in offering("role_switch"))
        raise EngineConfigError(
            "--kv-transfer-config: pd_role (runtime role switching) needs "
            f'"kv_connector": {needs} and "kv_role": "kv_both"'
        )
    return str(value)


def _moriio(
    connector: str, extra: dict, role: str, policy: str, http_port: int, env: Mapping[str, str]
) -> KVTransferSettings:
    if "http_port" in extra and _port(extra["http_port"], "http_port") != http_port:
        raise EngineConfigError(
            "--kv-transfer-config: kv_connector_extra_config.http_port must equal --port"
        )
    # vLLM 0.32 reads read_mode from the extra config; older versions only the env var.
    if "read_mode" in extra:
        read_mode = str(extra["read_mode"]).lower() in ("true", "1")
    else:
        read_mode = env.get("VLLM_MORIIO_CONNECTOR_READ_MODE", "0").lower() in ("true", "1")
    proxy_ip = extra.get("proxy_ip")
    ping = extra.get("proxy_ping_port")
    # vLLM takes host_ip when set (and not empty), else the machine's own IP; the stand-in's
    # "own IP" is its --host address.
    host_ip = extra.get("host_ip")
    return KVTransferSettings(
        connector=connector,
        role=role,
        read_mode=read_mode,
        kv_port=_port(extra.get("handshake_port", 6301), "handshake_port"),
        notify_port=_port(extra.get("notify_port", 6105), "notify_port"),
        host=_host(host_ip, "kv_connector_extra_config.host_ip") if host_ip else None,
        proxy_ip=_host(proxy_ip, "kv_connector_extra_config.proxy_ip") if proxy_ip else None,
        proxy_ping_port=_port(ping, "proxy_ping_port") if ping is not None else None,
        load_failure_policy=policy,
        transfer_timeout_s=float(extra.get("transfer_timeout", 30.0)),
        extra=extra,
    )


def _port(value: object, name: str) -> int:
    try:
        port = int(str(value))
    except ValueError:
        raise EngineConfigError(f"{name} must be a port number, got {value!r}") from None
    if not 0 < port < 65536:
        raise EngineConfigError(f"{name} must be between 1 and 65535, got {port}")
    return port


def _host(value: object, name: str) -> str:
    """A bare IP address or DNS name: no port, scheme or path (vLLM pastes it into
    tcp://HOST:PORT and into the addresses it hands its peers, so anything else breaks
    later and further away)."""
    text = str(value)
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    if _HOSTNAME.match(text) is None:
        raise EngineConfigError(
            f"{name} must be an IP address or a host name (no port, scheme or path), got {text!r}"
        )
    return text
