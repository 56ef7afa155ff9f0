"""`pdctl sim`'s flags into EngineSettings: each value checked with an error naming its flag,
vLLM's defaults chosen where a flag was left out, and the model proven to fit its GPUs."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from domain import profiles
from domain.engine.defaults import engine_defaults
from domain.engine.start_time import CACHES
from domain.kv_connectors.base import KV_HOLD_TIMEOUT_S
from simulator.config.engine import EngineConfigError, EngineSettings, parse_kv_transfer_config

# The block sizes vLLM's CacheConfig accepts on CUDA/ROCm and CPU.
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


def _derivable(flag: str, name: str) -> None:
    try:
        profiles.model(name)
    except profiles.ModelConfigError as exc:
        raise EngineConfigError(f"{flag} {exc}") from None


def model_profile_for(model: str | None, model_profile: str | None) -> str:
    """A profile name, or a config path (--model-profile PATH, or --model a local folder as
    vLLM takes it) that profiles.model derives the profile from."""
    if model_profile:
        _derivable("--model-profile", model_profile)
        return model_profile
    if not model:
        return "tiny"
    if Path(model, "config.json").is_file():
        _derivable("--model", model)
        return model
    if (name := profiles.for_model(model)) is not None:
        return name
    known = ", ".join(profiles.available("models"))
    raise EngineConfigError(
        f"--model {model!r} has no stand-in profile; pass --model-profile (known: {known})"
    )


def start_settings(scale: float, cache: str) -> dict[str, Any]:
    if not 0 <= scale <= 1000:
        raise EngineConfigError("--start-time-scale must be between 0 and 1000")
    if cache not in CACHES:
        raise EngineConfigError(f"--start-cache must be one of {', '.join(CACHES)}")
    return {"start_time_scale": scale, "start_cache": cache}


def listen_sources(settings: EngineSettings) -> str:
    """Every address the stand-in binds, with the flag or setting that chose it."""
    sources = [f"--port {settings.port} on --host {settings.host}"]
    kv = settings.kv
    if kv is None:
        return sources[0]
    if not kv.backend.transfer_id:  # every connector but MoRIIO takes NIXL's variables
        ports = [f"VLLM_NIXL_SIDE_CHANNEL_PORT {kv.kv_port}"]
        host = f"VLLM_NIXL_SIDE_CHANNEL_HOST {settings.kv_bind_host}"
    else:
        ports = [f"kv_connector_extra_config.handshake_port {kv.kv_port}"]
        if kv.notify_port is not None:
            ports.append(f"kv_connector_extra_config.notify_port {kv.notify_port}")
        host = (
            f"kv_connector_extra_config.host_ip {kv.host}"
            if kv.host is not None
            else f"--host {settings.host}"
        )
    sources += [f"{port} on {host}" for port in ports]
    return ", ".join(sources)


def settings_from_flags(
    *,
    model,
    host,
    port,
    served,
    model_profile,
    hardware,
    tp,
    max_num_seqs,
    max_num_batched_tokens,
    block_size,
    max_model_len,
    prefix,
    gpu_util,
    blocks,
    kv_transfer_config,
    time_scale,
    kv_link_gbps,
    kv_wire_scale,
    heartbeat_s,
) -> EngineSettings:
    profile = model_profile_for(model, model_profile)
    spec = profiles.model(profile)
    hardware = hardware or profiles.default_hardware(profile)
    profiles.hardware(hardware)
    checks = [
        (tp >= 1, "--tensor-parallel-size must be >= 1"),
        (max_num_seqs is None or max_num_seqs >= 1, "--max-num-seqs must be >= 1"),
        (
            max_num_batched_tokens is None or max_num_batched_tokens >= 1,
            "--max-num-batched-tokens must be >= 1",
        ),
        (
            block_size is None or block_size in BLOCK_SIZES,
            f"--block-size must be one of {', '.join(map(str, BLOCK_SIZES))}",
        ),
        (
            max_model_len is None or 1 <= max_model_len <= spec.max_model_len,
            f"--max-model-len must be between 1 and {spec.max_model_len} for {profile}",
        ),
        (0 < gpu_util <= 1, "--gpu-memory-utilization must be in (0, 1]"),
        (blocks is None or blocks >= 1, "--num-gpu-blocks-override must be >= 1"),
        (time_scale > 0, "--time-scale must be > 0"),
        (kv_link_gbps is None or kv_link_gbps > 0, "--kv-link-gbps must be > 0"),
        (0 < kv_wire_scale <= 1, "--kv-wire-scale must be in (0, 1]"),
        (0 < port < 65536, "--port must be between 1 and 65535"),
        (heartbeat_s > 0, "--registration-interval must be > 0"),
    ]
    for ok, message in checks:
        if not ok:
            raise EngineConfigError(message)
    kv = parse_kv_transfer_config(kv_transfer_config, port, os.environ)
    chosen = engine_defaults(
        profiles.hardware(hardware),
        max_model_len=max_model_len or spec.max_model_len,
        world_size=tp,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        block_size=block_size,
        enable_prefix_caching=prefix,
    )
    settings = EngineSettings(
        host=host,
        port=port,
        served_model_name=served or model or profile,
        model_profile=profile,
        hardware=hardware,
        tensor_parallel_size=tp,
        max_num_seqs=chosen.max_num_seqs,
        max_num_batched_tokens=chosen.max_num_batched_tokens,
        block_size=chosen.block_size,
        max_model_len=max_model_len,
        enable_prefix_caching=chosen.enable_prefix_caching,
        num_gpu_blocks_override=blocks,
        gpu_memory_utilization=gpu_util,
        time_scale=time_scale,
        kv=kv,
        kv_link_gbps=kv_link_gbps,
        kv_wire_scale=kv_wire_scale,
        registration_interval_s=heartbeat_s,
        kv_hold_timeout_s=hold_timeout(kv, os.environ),
        defaults_applied=chosen.explain(),
    )
    from simulator.server.app import build_scheduler

    if (
        build_scheduler(settings).pool.num_blocks * settings.block_size < settings.model_len
        and blocks is None
    ):
        raise EngineConfigError(
            f"{profile} does not fit on {tp} x {hardware}: not enough memory for the KV cache "
            "of one max-model-len request (raise -tp or lower --max-model-len)"
        )
    return settings


def hold_timeout(kv, env) -> float:
    """How long a prefill keeps KV nobody took: vLLM's abort timeouts (NIXL 480 s via
    VLLM_NIXL_ABORT_REQUEST_TIMEOUT, MoRIIO 3600 s)."""
    default = kv.backend.kv_hold_timeout_s if kv is not None else KV_HOLD_TIMEOUT_S
    raw = env.get("VLLM_NIXL_ABORT_REQUEST_TIMEOUT", f"{default:g}")
    try:
        value = float(raw)
    except ValueError:
        raise EngineConfigError(
            f"VLLM_NIXL_ABORT_REQUEST_TIMEOUT must be seconds, got {raw!r}"
        ) from None
    if not 0 < value < math.inf:  # nan too
        raise EngineConfigError("VLLM_NIXL_ABORT_REQUEST_TIMEOUT must be a finite number > 0")
    return value
