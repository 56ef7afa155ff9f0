"""A PD deployment as an operator describes it: the desired state pdctl stores and reconciles.

Pure pydantic models. Field shapes are checked by pydantic; the rules that relate fields to
each other are checked by `check(spec)` (controller/spec/rules.py), each error located at the
field it is about (the API turns both into 422s naming the field). Checks that need the world
(other deployments, busy host ports, operator settings) live in controller/spec/validation.py.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from connector.settings import (
    DecodeTimeout,
    EjectMaxShare,
    FirstByteTimeout,
    HoldDeadline,
    HoldQueue,
    Policy,
    PrefillTimeout,
    ProxySettings,
    RetryAttempts,
    RetryBudgetRatio,
    RetryDeadline,
)
from controller.spec.attach import Discovery, ExternalProxy, InstanceUrl
from controller.spec.placement import NodeSelector, Placement
from controller.spec.sections.autopilot import Autopilot
from controller.spec.sections.canary import CanaryConfig
from controller.spec.sections.encode import EcTransfer
from controller.spec.sections.kv_extra import KvExtra
from controller.spec.sections.role_switch import RoleSwitch
from domain.kv_connectors import KvConnectorBackend, lookup, offering
from domain.modes import Connector, Mode, Role

Slug = Annotated[
    str, StringConstraints(max_length=40, pattern=r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$")
]
Port = Annotated[int, Field(ge=1, le=65535)]

# The names a spec may give: domain/modes.py's, as plain strings (the spec stores the name
# vLLM reads). What each one can do, its backend says (domain/kv_connectors/).
CONNECTORS = tuple(c.value for c in Connector)
ENCODE = Role.ENCODE  # an encode group moves no KV (controller/spec/sections/encode.py)
# Flags pdctl renders itself; an operator's extra args may not set them.
OWNED_FLAGS = frozenset(
    {
        "--port",
        "--host",
        "--served-model-name",
        "--kv-transfer-config",
        "--ec-transfer-config",
        "-tp",
        "--tensor-parallel-size",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--max-model-len",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--model",
        "--hardware",
        "--model-profile",
        "--time-scale",
        "--start-time-scale",
    }
)
# The proxy's own defaults, which a spec's proxy section takes (ProxyConfig).
PROXY_DEFAULTS = {n: f.default for n, f in ProxySettings.model_fields.items()}
# ProxyConfig's fields that are no proxy setting: where it runs, its ports (allocated).
PROXY_PLACE = frozenset({"port", "registry_port", "node"})
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
ExtraArg = Annotated[str, StringConstraints(min_length=1, max_length=512)]


class Engine(enum.StrEnum):
    VLLM = "vllm"
    SIM = "sim"
    EXTERNAL = "external"  # attached: engines pdctl did not start (controller/spec/attach.py)


class Topology(enum.StrEnum):
    COLOCATED = "colocated"
    DISAGGREGATED = "disaggregated"


class _Strict(BaseModel):
    # No NaN or infinity anywhere: JSON bodies may carry them (Python's json reads Infinity),
    # and a stored infinite number breaks every page and command that formats it.
    model_config = ConfigDict(extra="forbid", use_enum_values=False, allow_inf_nan=False)


class InstancePorts(_Strict):
    """One instance's ports; any left out are allocated from the deployment's range."""

    http: Port | None = None
    handshake: Port | None = None  # MoRIIO handshake base (one port per TP rank)
    notify: Port | None = None  # MoRIIO notify base (one port per TP rank)
    side_channel: Port | None = None  # NIXL side channel


class InstanceGroup(_Strict):
    name: Slug
    role: Role
    count: int = Field(1, ge=1, le=64)
    tp: int = Field(1, ge=1, le=64)
    gpus: list[Annotated[int, Field(ge=0, le=1023)]] = Field(default_factory=list, max_length=1024)
    mode: Mode | None = None
    ports: list[InstancePorts] = Field(default_factory=list, max_length=64)
    max_num_seqs: int | None = Field(None, ge=1, le=65536)
    max_num_batched_tokens: int | None = Field(None, ge=1, le=1 << 20)
    extra_args: list[ExtraArg] = Field(default_factory=list, max_length=64)
    env: dict[EnvName, Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=dict, max_length=64
    )
    placement: Placement | None = None  # on a cluster: which nodes, GPUs per instance
    # Over the deployment's kv_connector_extra_config for this group's instances.
    kv_connector_extra_config: KvExtra = Field(default_factory=dict)
    # Attached only (engine external): each instance's base URL, in instance order.
    urls: list[InstanceUrl] = Field(default_factory=list, max_length=64)
    # Attached only, instead of urls: where the instances are found, again and again.
    discover: Discovery | None = None

    def instance_gpus(self, index: int) -> list[int]:
        return self.gpus[index * self.tp : (index + 1) * self.tp]


class SloTargets(_Strict):
    ttft_ms: float | None = Field(1000.0, gt=0, le=3_600_000)  # at most an hour
    itl_ms: float | None = Field(50.0, gt=0, le=600_000)
    tpot_ms: float | None = Field(None, gt=0, le=600_000)
    itl_stat: str = Field("p99", pattern=r"^(mean|p99|max)$")


class ProxyConfig(_Strict):
    """Where the proxy runs and listens, and the proxy settings an operator tunes per
    deployment: ProxySettings' fields (connector/settings/proxy.py) with their types, bounds and
    defaults, seconds named with `_s`; None is the proxy's own default. A spec bounds a few
    more tightly than the proxy does."""

    port: Port | None = None
    registry_port: Port | None = None
    policy: Policy = PROXY_DEFAULTS["policy"]
    hold_queue: Annotated[HoldQueue, Field(le=100_000)] = PROXY_DEFAULTS["hold_queue"]
    hold_deadline_s: Annotated[HoldDeadline, Field(gt=0, le=3600)] = PROXY_DEFAULTS["hold_deadline"]
    # How long the proxy waits on a leg before failing the request with a 502 naming it:
    # the whole prefill leg, and the longest silence in a decode stream.
    prefill_timeout_s: Annotated[PrefillTimeout, Field(le=3600)] | None = None
    decode_timeout_s: Annotated[DecodeTimeout, Field(le=3600)] | None = None
    # Retries and ejection (connector/legs/retry.py).
    first_byte_timeout_s: FirstByteTimeout | None = None
    retry_attempts: RetryAttempts | None = None
    retry_deadline_s: RetryDeadline | None = None
    retry_budget_ratio: RetryBudgetRatio | None = None
    eject_max_share: EjectMaxShare | None = None
    node: NodeSelector | None = None  # on a cluster: where the proxy runs (None: our node)

    def proxy_settings(self) -> dict[str, Any]:
        """The proxy settings this section gives, by ProxySettings' field names."""
        return {
            name.removesuffix("_s"): value
            for name, value in self
            if name not in PROXY_PLACE and value is not None
        }


def _model_name(model: str) -> str:
    if model.startswith("-"):
        raise ValueError("a model name may not start with '-': the engine would read it as a flag")
    if any(c.isspace() or not c.isprintable() for c in model):
        raise ValueError("a model name may not contain whitespace, newlines or control characters")
    return model


ModelName = Annotated[
    str, StringConstraints(min_length=1, max_length=200), AfterValidator(_model_name)
]
FlagName = Annotated[str, StringConstraints(pattern=r"^--?[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]


class UnsafeAllow(_Strict):
    """An operator's audited exception to the engine allowlists (controller/spec/engine_flags.py,
    controller/spec/engine_env.py) for this deployment: the exact env names and flags, and why.
    Honoured only on a host whose operator setting allow_code_env is on; stored with the spec,
    so every revision and diff shows it."""

    env: list[EnvName] = Field(default_factory=list, max_length=16)
    args: list[FlagName] = Field(default_factory=list, max_length=16)
    reason: Annotated[str, StringConstraints(min_length=10, max_length=500)]

    def summary(self) -> str:
        """One line for events: what is let through and why."""
        return f"{', '.join([*self.env, *self.args])} ({self.reason})"


class DeploymentSpec(_Strict):
    name: Slug
    engine: Engine = Engine.SIM
    model: ModelName
    hardware: str | None = Field(None, max_length=64)  # the stand-in's hardware profile
    topology: Topology
    connector: str | None = None
    groups: list[InstanceGroup] = Field(min_length=1, max_length=16)
    proxy: ProxyConfig = Field(default_factory=ProxyConfig)
    slo: SloTargets = Field(default_factory=SloTargets)
    canary: CanaryConfig = Field(default_factory=CanaryConfig)  # controller/spec/sections/canary.py
    max_model_len: int | None = Field(None, ge=16, le=1 << 21)
    prefix_caching: bool = True
    # MoRIIO runs without prefix caching in every published setup; keeping it needs a reason.
    prefix_caching_override_reason: str | None = Field(None, max_length=500)
    extra_args: list[ExtraArg] = Field(default_factory=list, max_length=64)
    env: dict[EnvName, Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=dict, max_length=64
    )
    time_scale: float = Field(1.0, gt=0, le=1000)  # stand-in only
    # Stand-in only: ports open after the modelled start (domain/engine/start_time.py) x time_scale
    # x it
    start_time_scale: float = Field(0.0, ge=0, le=1000)
    # Merged into --kv-transfer-config's kv_connector_extra_config of prefill and decode
    # instances, e.g. ExampleConnector's shared_storage_path or NIXL's backends.
    kv_connector_extra_config: KvExtra = Field(default_factory=dict)
    unsafe_allow: UnsafeAllow | None = None
    role_switch: RoleSwitch | None = None  # runtime P/D role switching (role_switch_spec.py)
    autopilot: Autopilot | None = None  # the P:D ratio autopilot (autopilot_spec.py)
    ec_transfer: EcTransfer | None = None  # encode groups' EC connector (ec_spec.py)
    external_proxy: ExternalProxy | None = None  # attached only: the proxy clients use

    @property
    def attached(self) -> bool:
        """Engines pdctl did not start and only watches (controller/spec/attach.py)."""
        return self.engine is Engine.EXTERNAL

    def instance_names(self) -> list[str]:
        return [f"{g.name}-{i}" for g in self.groups for i in range(g.count)]

    @property
    def kv_backend(self) -> KvConnectorBackend | None:
        """Its connector's backend; None when colocated (or the name is unknown)."""
        return lookup(self.connector)


def who_has(fact: str) -> str:
    """The connectors with `fact`, for a message refusing it to another."""
    return " or ".join(b.connector for b in offering(fact))
