"""Pure: what to run for a deployment. One spec renders the exact `vllm serve` argv and env per
instance, the `pdctl sim` argv for the stand-in (same flags plus its own), and the proxy argv.

Everything is a list of arguments, never a shell string; `command` (shlex-quoted) is only for
people to read or copy. What the operator sees as "the command" is always the real
`vllm serve ...` line, whatever actually runs (PROTOCOL.md section 1, ARCHITECTURE.md).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from connector import flags
from connector.settings import ProxySettings
from controller.launch.placement import PROXY, Addresses, planned
from controller.launch.ports import AllocatedPorts
from controller.launch.process import VLLM_SERVE, Launch, LaunchSettings
from controller.launch.registry_expect import expected_env
from controller.launch.render_tier import render_launch
from controller.spec.deployment import DeploymentSpec, Engine, InstanceGroup, InstancePorts, Role
from controller.spec.sections.bidir import bidirectional
from controller.spec.sections.encode import ec_transfer_config
from controller.spec.sections.role_switch import serving_role
from domain.kv_connectors import InstanceKv, KvPorts

VLLM_CPU_MODULE = ("python", "-m", "vllm.entrypoints.openai.api_server")  # takes --model


def render(
    spec: DeploymentSpec,
    ports: AllocatedPorts,
    settings: LaunchSettings | None = None,
    placed: Addresses | None = None,
) -> list[Launch]:
    """The proxy first, then every instance in group order (the start order). `placed`: the
    node address of each process placed on a cluster (the rest run on this host)."""
    settings = settings or LaunchSettings()
    where = placed or Addresses(settings.host)
    launches = [proxy_launch(spec, ports, settings, where)]
    # The spec-to-instances step the Kubernetes renderer shares (controller/launch/placement.py).
    launches += [
        instance_launch(spec, inst.group, inst.index, ports, settings, where)
        for inst in planned(spec)
    ]
    return launches


def preview(
    spec: DeploymentSpec,
    ports: AllocatedPorts,
    settings: LaunchSettings | None = None,
    placed: Addresses | None = None,
) -> dict[str, dict[str, Any]]:
    from controller.launch.engine_defaults import defaults_note

    groups = {f"{g.name}-{i}": g for g in spec.groups for i in range(g.count)}
    out = {}
    for launch in render(spec, ports, settings, placed):
        out[launch.name] = launch.preview()
        if launch.name in groups:
            out[launch.name]["defaults"] = defaults_note(spec, groups[launch.name])
    return out


def reach_address(name: str, settings: LaunchSettings, where: Addresses) -> str:
    """Where others reach process `name`: its node's address, else the host's."""
    return where.by_name.get(name, settings.host)


def bind_address(name: str, settings: LaunchSettings, where: Addresses) -> str:
    """What an engine binds: its node's address if placed, else this host's (loopback unless
    the operator says otherwise); never vLLM's default of every interface."""
    return where.by_name.get(name) or node_address(settings)


# Engine instances -------------------------------------------------------------------------


def instance_launch(
    spec: DeploymentSpec,
    group: InstanceGroup,
    index: int,
    ports: AllocatedPorts,
    settings: LaunchSettings,
    where: Addresses | None = None,
) -> Launch:
    name = f"{group.name}-{index}"
    where = where or Addresses(settings.host)
    own = ports.instances[name]
    if group.role is Role.RENDER and own.http is not None:  # controller/launch/render_tier.py
        url = f"http://{reach_address(name, settings, where)}:{own.http}"
        bind = bind_address(name, settings, where)
        return render_launch(spec, group, name, own, bind, url, settings, sim_flags(spec))
    flags = engine_flags(spec, group, own, ports.registry, settings, where, name)
    vllm = [*VLLM_SERVE, spec.model, *flags]
    if spec.engine == Engine.SIM:
        argv = [*settings.pdctl_command, "sim", spec.model, *flags, *sim_flags(spec)]
        if _registers(spec) and settings.sim_registration_interval is not None:
            argv += ["--registration-interval", str(settings.sim_registration_interval)]
    elif settings.vllm_command[-1:] == ("serve",):
        argv = [*settings.vllm_command, spec.model, *flags]
    else:
        argv = [*settings.vllm_command, "--model", spec.model, *flags]
    if own.http is None:
        raise ValueError(f"{name} has no HTTP port: allocate the ports first")
    return Launch(
        name=name,
        argv=argv,
        env=instance_env(spec, group, index, own, where.by_name.get(name)),
        command=shlex.join(vllm),
        url=f"http://{reach_address(name, settings, where)}:{own.http}",
        http_port=own.http,
        role=serving_role(spec, group, name).value,
        group=group.name,
        mode=group.mode.value if group.mode else None,
        gpus=group.instance_gpus(index),
        ports=own,
        registers=_registers(spec) and group.role is not Role.ENCODE,
        address=where.by_name.get(name),
    )


def engine_flags(
    spec: DeploymentSpec,
    group: InstanceGroup,
    own: InstancePorts,
    registry_port: int,
    settings: LaunchSettings,
    where: Addresses | None = None,
    name: str = "",
) -> list[str]:
    """vLLM's flags, in the order an operator writes them; the stand-in takes the same."""
    where = where or Addresses(settings.host)
    flags = ["--port", str(own.http), "--host", bind_address(name, settings, where)]
    flags += ["--served-model-name", spec.model, "-tp", str(group.tp)]
    if group.max_num_seqs is not None:
        flags += ["--max-num-seqs", str(group.max_num_seqs)]
    if group.max_num_batched_tokens is not None:
        flags += ["--max-num-batched-tokens", str(group.max_num_batched_tokens)]
    if spec.max_model_len is not None:
        flags += ["--max-model-len", str(spec.max_model_len)]
    if not prefix_caching(spec) or group.role is Role.ENCODE:  # vLLM turns it off there too
        flags.append("--no-enable-prefix-caching")
    config = kv_transfer_config(
        spec,
        group,
        own,
        registry_port,
        proxy_ip=reach_address(PROXY, settings, where),
        host_ip=where.by_name.get(name),
    )
    # controller/spec/sections/role_switch.py
    if config is not None and spec.role_switch is not None:
        config["pd_role"] = serving_role(spec, group, name).value
    if config is not None:
        flags += ["--kv-transfer-config", json.dumps(config, separators=(",", ":"))]
    if (ec := ec_transfer_config(spec, group)) is not None:  # controller/spec/sections/encode.py
        flags += ["--ec-transfer-config", json.dumps(ec, separators=(",", ":"))]
    return [*flags, *spec.extra_args, *group.extra_args]


def node_address(settings: LaunchSettings) -> str:
    """The address an engine not placed on a cluster binds: the host's."""
    return settings.bind_host or settings.host


def prefix_caching(spec: DeploymentSpec) -> bool:
    # MoRIIO runs without it unless an operator overrode that with a reason (validation).
    kv = spec.kv_backend
    if kv is not None and kv.prefix_caching_off and not spec.prefix_caching_override_reason:
        return False
    return spec.prefix_caching


def sim_flags(spec: DeploymentSpec) -> list[str]:
    """The stand-in's own flags: which model and hardware it plays, and how slowly."""
    flags = []
    profile = sim_model_profile(spec.model)
    if profile is not None:
        flags += ["--model-profile", profile]
    if spec.hardware:
        flags += ["--hardware", spec.hardware]
    if spec.start_time_scale:
        flags += ["--start-time-scale", _number(spec.start_time_scale)]
    return [*flags, "--time-scale", _number(spec.time_scale)]


def sim_model_profile(model: str) -> str | None:
    """The stand-in profile for a model name or Hugging Face id; None when none matches."""
    from domain import profiles

    return profiles.for_model(model)


def kv_transfer_config(
    spec: DeploymentSpec,
    group: InstanceGroup,
    own: InstancePorts,
    registry_port: int,
    *,
    proxy_ip: str,
    host_ip: str | None = None,
) -> dict[str, Any] | None:
    """The --kv-transfer-config of one instance, as its connector's backend renders it
    (domain/kv_connectors/). proxy_ip is the proxy's node address (where a registry listens),
    host_ip the instance's own (what it advertises for its KV ports), given only when placed
    on a cluster node (on one host vLLM's default, the host's IP, is the same place)."""
    kv = spec.kv_backend
    if kv is None or group.role in (Role.COLOCATED, Role.ENCODE):
        return None
    extra = {**spec.kv_connector_extra_config, **group.kv_connector_extra_config}
    inst = _instance_kv(
        spec, group, own, host_ip, extra=extra, proxy_ip=proxy_ip, registry_port=registry_port
    )
    return kv.kv_transfer_config(inst)


def _instance_kv(
    spec: DeploymentSpec,
    group: InstanceGroup,
    own: InstancePorts,
    node_address: str | None,
    **more: Any,
) -> InstanceKv:
    """What a backend renders one instance of `group` from."""
    ports = KvPorts(own.http, own.handshake, own.notify, own.side_channel)
    return InstanceKv(group.role, spec.name, group.mode, ports, node_address=node_address, **more)


def instance_env(
    spec: DeploymentSpec,
    group: InstanceGroup,
    index: int,
    own: InstancePorts,
    address: str | None = None,
) -> dict[str, str]:
    """Deployment env, then group env, then what pdctl owns (GPUs, connector ports, mode)."""
    env = {**spec.env, **group.env}
    gpus = group.instance_gpus(index)
    if gpus:
        env[gpu_env_name(spec)] = ",".join(str(g) for g in gpus)
    if (kv := spec.kv_backend) is not None:  # its ports, on a cluster node its address, mode
        env.update(kv.kv_env(_instance_kv(spec, group, own, address)))
    return env


def gpu_env_name(spec: DeploymentSpec) -> str:
    """ROCm picks GPUs by HIP_VISIBLE_DEVICES: AMD hardware, or an AMD-only connector (MoRIIO)."""
    kv = spec.kv_backend
    amd = (spec.hardware or "").lower().startswith("mi") or (kv is not None and kv.amd_only)
    return "HIP_VISIBLE_DEVICES" if amd else "CUDA_VISIBLE_DEVICES"


# The proxy --------------------------------------------------------------------------------


def proxy_launch(
    spec: DeploymentSpec,
    ports: AllocatedPorts,
    settings: LaunchSettings,
    where: Addresses | None = None,
) -> Launch:
    where = where or Addresses(settings.host)
    argv = [*settings.pdctl_command, *proxy_args(spec, ports, settings, where)]
    # MoRIIO instances register themselves: the proxy accepts only the ones launched here.
    addresses = engine_addresses(settings, where)
    handover = expected_env(spec, ports, addresses) if _registers(spec) else {}
    return Launch(
        name=PROXY,
        argv=argv,
        env={},
        handover=handover,
        command=shlex.join(["pdctl", *argv[len(settings.pdctl_command) :]]),
        url=f"http://{reach_address(PROXY, settings, where)}:{ports.proxy}",
        http_port=ports.proxy,
        address=where.by_name.get(PROXY),
    )


def engine_addresses(settings: LaunchSettings, where: Addresses) -> Addresses:
    """Where each engine listens (what a MoRIIO registration from it names)."""
    return Addresses(node_address(settings), where.by_name)


def proxy_args(
    spec: DeploymentSpec,
    ports: AllocatedPorts,
    settings: LaunchSettings,
    where: Addresses | None = None,
) -> list[str]:
    """`proxy` and the flags of the proxy's settings (connector/flags.py renders them)."""
    proxy = proxy_settings(spec, ports, settings, where or Addresses(settings.host))
    return ["proxy", *flags.argv(proxy), *settings.proxy_extra_args]


def proxy_settings(
    spec: DeploymentSpec, ports: AllocatedPorts, settings: LaunchSettings, where: Addresses
) -> ProxySettings:
    """What a deployment's proxy is told: where it listens, how instances hand over the KV,
    the spec's proxy section and SLO, and every instance that does not register itself."""
    given: dict[str, Any] = {"port": ports.proxy}
    if bind := where.by_name.get(PROXY) or settings.bind_host:
        given["host"] = bind
    kv = spec.kv_backend
    if kv is None:
        given |= {"mode": "colocated", "registry_port": None}
    elif kv.registers:
        # Instances register themselves over ZMQ, each into the group of its mode.
        given |= {"connector": kv.routed_as, "registry_port": ports.registry}
        if settings.registry_allow:
            given["registry_allow"] = settings.registry_allow
    else:
        # NIXL, and the connectors whose hand-off has NIXL's shape (kv_transfer_params
        # returned by prefill, relayed to decode), in read mode; no registry.
        given |= {"connector": kv.routed_as, "mode": "read", "registry_port": None}
    given |= spec.proxy.proxy_settings()
    slo = spec.slo
    given |= {"slo_ttft_ms": slo.ttft_ms, "slo_itl_ms": slo.itl_ms, "slo_tpot_ms": slo.tpot_ms}
    given["itl_slo_stat"] = slo.itl_stat
    if (bidir := bidirectional(spec)).enabled:  # controller/spec/sections/bidir.py
        given |= {"bidirectional_kv": True, "kv_blocks_ttl": bidir.ttl_s}
    # MoRIIO prefills and decodes register themselves; encoders and render instances never do.
    for group in spec.groups:
        if _registers(spec) and group.role not in (Role.ENCODE, Role.RENDER):
            continue
        for i in range(group.count):
            name = f"{group.name}-{i}"
            role = serving_role(spec, group, name).value
            field = role if role in ("prefill", "decode", "encode", "render") else "instance"
            address = reach_address(name, settings, where)
            url = f"http://{address}:{ports.instances[name].http}"
            given[field] = (*given.get(field, ()), url)
    return ProxySettings(**given)


def _registers(spec: DeploymentSpec) -> bool:
    """Its instances register with the proxy's registry (MoRIIO's)."""
    kv = spec.kv_backend
    return kv is not None and kv.registers


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
