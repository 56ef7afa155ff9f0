"""A PD deployment as an operator describes it: the desired state pdctl stores and reconciles.

Pure pydantic models. Field shapes are checked by pydantic; the rules that relate fields to
each other are checked by `check(spec)`, each error located at the field it is about (the API
turns both into 422s naming the field). Checks that need the world (other deployments, busy
host ports, operator settings) live in controller/spec/validation.py.
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
from controller.spec.attach import Discovery, ExternalProxy, InstanceUrl, check_attached
from controller.spec.field_error import FieldError
from controller.spec.placement import NodeSelector, Placement, check_placement
from controller.spec.sections.autopilot import Autopilot, check_autopilot
from controller.spec.sections.bidir import check_bidirectional
from controller.spec.sections.canary import CanaryConfig
from controller.spec.sections.encode import EcTransfer, check_encode
from controller.spec.sections.kv_extra import KvExtra, check_keys
from controller.spec.sections.render_tier import check_render_tier
from controller.spec.sections.role_switch import RoleSwitch, check_role_switch
from domain.kv_connectors import KvConnectorBackend, lookup, names, offering
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


def check(spec: DeploymentSpec) -> None:
    """The rules that relate fields to each other; raises FieldError at the first broken one."""
    check_attached(spec)  # first: an attached spec names addresses, nothing to launch
    check_bidirectional(spec)  # then: a colocated spec asking for it hears about the key
    check_encode(spec)  # before the KV rules: an encode group hears why it has no KV
    check_render_tier(spec)  # before the groups: a render group is none of theirs
    _check_connector(spec)
    _check_groups(spec)
    _check_gpus(spec)
    check_placement(spec)
    _check_ports(spec)
    _check_extra_args(spec)
    check_role_switch(spec)
    check_autopilot(spec)


def _check_connector(spec: DeploymentSpec) -> None:
    if spec.topology is Topology.DISAGGREGATED:
        if spec.connector is None:
            raise FieldError(("connector",), "a disaggregated deployment needs a KV connector")
        if spec.kv_backend is None:
            raise FieldError(
                ("connector",),
                f"unknown connector {spec.connector!r}; known: {', '.join(names())}",
            )
    elif spec.connector is not None:
        raise FieldError(
            ("connector",), "a colocated deployment moves no KV: leave connector unset"
        )
    if spec.kv_connector_extra_config and spec.connector is None:
        raise FieldError(
            ("kv_connector_extra_config",),
            "a colocated deployment has no KV connector to configure",
        )
    kv = spec.kv_backend
    owned = kv.owned_extra_keys if kv is not None else frozenset()
    check_keys(("kv_connector_extra_config",), spec.kv_connector_extra_config, owned)
    for i, group in enumerate(spec.groups):
        where = ("groups", i, "kv_connector_extra_config")
        if group.kv_connector_extra_config and (
            spec.connector is None or group.role == Role.COLOCATED
        ):
            raise FieldError(where, "a colocated group moves no KV: it has no connector to set")
        check_keys(where, group.kv_connector_extra_config, owned)
    off = kv.prefix_caching_off if kv is not None else None
    if off and spec.prefix_caching and not spec.prefix_caching_override_reason:
        raise FieldError(
            ("prefix_caching",),
            f"{spec.connector} runs with prefix caching off ({off}); set "
            "prefix_caching false, or give prefix_caching_override_reason",
        )


def _check_groups(spec: DeploymentSpec) -> None:
    group_names = [g.name for g in spec.groups]
    modes = spec.kv_backend is not None and spec.kv_backend.has_modes
    for i, group in enumerate(spec.groups):
        if group_names.count(group.name) > 1:
            raise FieldError(("groups", i, "name"), f"group name {group.name!r} is used twice")
        if group.role is Role.RENDER:  # checked by controller/spec/sections/render_tier.py
            continue
        if spec.topology is Topology.COLOCATED and group.role not in (Role.COLOCATED, ENCODE):
            raise FieldError(
                ("groups", i, "role"), "a colocated deployment has only colocated groups"
            )
        if spec.topology is Topology.DISAGGREGATED and group.role is Role.COLOCATED:
            raise FieldError(
                ("groups", i, "role"), "a disaggregated deployment has prefill and decode groups"
            )
        if group.mode is Mode.COLOCATED:
            raise FieldError(
                ("groups", i, "mode"),
                "a group's mode is read or write; a colocated group has none",
            )
        if group.mode is not None and not modes:
            raise FieldError(
                ("groups", i, "mode"),
                f"{spec.connector or 'no connector'} has "
                f"no read/write modes (only {who_has('has_modes')} does)",
            )
        if modes and group.mode is None and group.role is not ENCODE:
            raise FieldError(
                ("groups", i, "mode"), f"{spec.connector} groups need a mode: read or write"
            )
        if group.ports and len(group.ports) != group.count:
            raise FieldError(
                ("groups", i, "ports"), f"give ports for all {group.count} instances or for none"
            )
    if spec.topology is Topology.DISAGGREGATED:
        if {g.role for g in spec.groups} - {ENCODE, Role.RENDER} != {Role.PREFILL, Role.DECODE}:
            raise FieldError(
                ("groups",),
                "a disaggregated deployment needs at least one prefill group and one decode group",
            )
        if modes:
            for mode in {g.mode for g in spec.groups if g.role not in (ENCODE, Role.RENDER)}:
                if {g.role for g in spec.groups if g.mode == mode} != {Role.PREFILL, Role.DECODE}:
                    raise FieldError(
                        ("groups",),
                        f"mode {mode} has no prefill/decode pair: "
                        "a prefill and its decode must run the same mode",
                    )


def _check_gpus(spec: DeploymentSpec) -> None:
    owner: dict[int, str] = {}
    for i, group in enumerate(spec.groups):
        needs_gpus = bool(group.gpus)  # none given: the stand-in, or vLLM on CPU
        if needs_gpus and len(group.gpus) != group.count * group.tp:
            raise FieldError(
                ("groups", i, "gpus"),
                f"{group.count} instance(s) x TP "
                f"{group.tp} need {group.count * group.tp} GPU ids, got "
                f"{len(group.gpus)}",
            )
        for j, gpu in enumerate(group.gpus):
            instance = f"{group.name}-{j // group.tp}"
            if gpu in owner:
                raise FieldError(
                    ("groups", i, "gpus"), f"GPU {gpu} is given to both {owner[gpu]} and {instance}"
                )
            owner[gpu] = instance


def _check_ports(spec: DeploymentSpec) -> None:
    used: dict[int, str] = {}

    def claim(port: int | None, width: int, what: str, loc: tuple) -> None:
        if port is None:
            return
        for p in range(port, port + width):
            if p in used:
                raise FieldError(loc, f"port {p} ({what}) is also {used[p]}")
            used[p] = what

    claim(spec.proxy.port, 1, "the proxy's HTTP port", ("proxy", "port"))
    claim(spec.proxy.registry_port, 1, "the proxy's registry port", ("proxy", "registry_port"))
    for i, group in enumerate(spec.groups):
        for j, ports in enumerate(group.ports):
            where = f"{group.name}-{j}"
            base = ("groups", i, "ports", j)
            claim(ports.http, 1, f"{where} HTTP", (*base, "http"))
            # MoRIIO bases: each TP rank adds its offset, so tp ports from each base.
            claim(ports.handshake, group.tp, f"{where} handshake", (*base, "handshake"))
            claim(ports.notify, group.tp, f"{where} notify", (*base, "notify"))
            claim(ports.side_channel, 1, f"{where} NIXL side channel", (*base, "side_channel"))


def _check_extra_args(spec: DeploymentSpec) -> None:
    lists: list[tuple[tuple[str | int, ...], list[str]]] = [(("extra_args",), spec.extra_args)]
    lists += [(("groups", i, "extra_args"), g.extra_args) for i, g in enumerate(spec.groups)]
    for loc, args in lists:
        for k, arg in enumerate(args):
            flag = arg.split("=", 1)[0]
            if owned := _owned_flag(flag):
                means = f" (vLLM reads it as {owned})" if owned != flag else ""
                raise FieldError(
                    (*loc, k),
                    f"{flag} is set by pdctl from the deployment{means}; change the field instead",
                )
            if shell := next((s for s in SHELL_SYNTAX if s in arg), None):
                raise FieldError(
                    (*loc, k),
                    f"extra args go to the engine as they are, never "
                    f"through a shell: shell syntax ({shell!r}) is refused",
                )
            if "kv_connector_module_path" in arg:
                raise FieldError(
                    (*loc, k), "kv_connector_module_path loads arbitrary code and is refused"
                )
            if any(c in arg for c in "\n\r\x00"):
                raise FieldError((*loc, k), "extra args may not contain newlines or NUL")


# Shell command syntax: no engine flag needs it, so it only shows someone expecting a shell
# (argv never goes through one; an inline chat template with these needs a file instead).
SHELL_SYNTAX = (";", "|", "&&", "`", "$(", "${")


def _owned_flag(flag: str) -> str | None:
    """The owned flag `flag` would set: vLLM's parser reads `_` as `-` and, like argparse,
    takes an unambiguous prefix (`--por` is `--port`); `-tp2` is `-tp 2`."""
    flag = flag.strip()
    if flag.startswith("--"):  # `--json-flag.key` sets --json-flag
        flag = "--" + flag[2:].split(".", 1)[0].replace("_", "-")
        if len(flag) > 2:
            return next((o for o in sorted(OWNED_FLAGS) if o.startswith(flag)), None)
        return None
    return next(
        (o for o in sorted(OWNED_FLAGS) if not o.startswith("--") and flag.startswith(o)), None
    )
