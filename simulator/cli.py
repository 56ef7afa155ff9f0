"""`pdctl sim`: run the stand-in engine with vLLM's flags (ARCHITECTURE.md, "One config")."""

from __future__ import annotations

import logging
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from domain import profiles
from domain.engine.defaults import engine_defaults
from domain.engine.frontend_cost import FrontendCost
from domain.engine.start_time import CACHES
from domain.kv_connectors.base import KV_HOLD_TIMEOUT_S
from simulator.config.encoder import ec_settings
from simulator.config.engine import EngineConfigError, EngineSettings, parse_kv_transfer_config
from simulator.engine import stats_log
from simulator.kv.peers import STALE_PEER
from simulator.model.frontend_clock import parse_cost
from simulator.server.event_loop import use_uvloop
from simulator.server.render import run_render

# vLLM flags the stand-in accepts and ignores (they change nothing it models), with whether
# they take a value. Anything else is refused, naming the flag.
IGNORED_VLLM_FLAGS = {
    "--enable-expert-parallel": False,
    "--trust-remote-code": False,
    "--enforce-eager": False,
    "--disable-log-requests": False,
    "--no-enable-chunked-prefill": False,
    "--distributed-executor-backend": True,
    "--dtype": True,
    "--load-format": True,
    "--kv-cache-dtype": True,
    "--swap-space": True,
    "--seed": True,
    "--uvicorn-log-level": True,
    "--data-parallel-size": True,
    "--pipeline-parallel-size": True,
}


# The block sizes vLLM's CacheConfig accepts on CUDA/ROCm and CPU.
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
MORIIO_METRICS = ("stats", "none")


def register(app: typer.Typer) -> None:
    app.command(
        "sim",
        help="Run a stand-in vLLM engine: vLLM's HTTP API and metrics, simulated GPU timing.",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(sim)


def _model_profile(model: str | None, model_profile: str | None) -> str:
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


def _tokenizer(flag: str | None, model: str | None) -> str | None:
    """--tokenizer, or the local --model folder's tokenizer.json; loaded once here so a bad
    file is refused naming the flag before anything binds."""
    path = Path(flag) if flag else find_tokenizer(model)
    if path is None:
        return None
    from simulator.protocol.model_tokenizer import ModelTokenizer, TokenizerError  # only if asked

    try:
        ModelTokenizer(path)
    except TokenizerError as exc:
        raise EngineConfigError(f"--tokenizer {exc}") from None
    return str(path)


def find_tokenizer(model: str | None) -> Path | None:
    """A local model folder's tokenizer.json, as vLLM takes it from --model by default."""
    if model and Path(model, "tokenizer.json").is_file():
        return Path(model)
    return None


def _derivable(flag: str, name: str) -> None:
    try:
        profiles.model(name)
    except profiles.ModelConfigError as exc:
        raise EngineConfigError(f"{flag} {exc}") from None


def _stale_peer(value: str) -> str:
    if value not in STALE_PEER:
        raise EngineConfigError(f"--kv-stale-peer must be one of {', '.join(STALE_PEER)}")
    return value


def _moriio_metrics(value: str) -> str:
    if value not in MORIIO_METRICS:
        raise EngineConfigError(f"--moriio-metrics must be one of {', '.join(MORIIO_METRICS)}")
    return value


def _frontend_cost(value: str) -> FrontendCost:
    try:
        return parse_cost(value)
    except ValueError as exc:
        raise EngineConfigError(str(exc)) from None


def _check_extra(args: list[str]) -> None:
    i = 0
    while i < len(args):
        flag = args[i].split("=", 1)[0]
        if flag not in IGNORED_VLLM_FLAGS:
            raise EngineConfigError(f"unknown flag {args[i]!r} for pdctl sim")
        takes_value = IGNORED_VLLM_FLAGS[flag] and "=" not in args[i]
        i += 2 if takes_value else 1


def sim(
    ctx: typer.Context,
    model_arg: str | None = typer.Argument(
        None, metavar="[MODEL]", help="Model (as for vllm serve)."
    ),
    model: str | None = typer.Option(None, "--model", help="Model name or HF id."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8100, "--port"),
    served_model_name: str | None = typer.Option(None, "--served-model-name"),
    model_profile: str | None = typer.Option(
        None, "--model-profile", help="Stand-in model profile, or a model folder or config.json."
    ),
    tokenizer: str | None = typer.Option(
        None,
        "--tokenizer",
        help="The model's tokenizer.json (or its folder): prompts count as vLLM counts them. "
        "Default: --model's folder's, else an estimate (~4 characters a token).",
    ),
    hardware: str | None = typer.Option(
        None,
        "--hardware",
        help="Stand-in hardware profile (default: cpu for the tiny model, else h100).",
    ),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
    max_num_seqs: int | None = typer.Option(
        None, "--max-num-seqs", help="Default: vLLM's for the device (see the startup line)."
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", help="Default: vLLM's for the device."
    ),
    block_size: int | None = typer.Option(
        None, "--block-size", help="KV block size in tokens. Default: 16 on GPUs, 128 on CPU."
    ),
    max_model_len: int | None = typer.Option(None, "--max-model-len"),
    enable_prefix_caching: bool | None = typer.Option(
        None, "--enable-prefix-caching/--no-enable-prefix-caching", help="Default: on."
    ),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization"),
    num_gpu_blocks_override: int | None = typer.Option(None, "--num-gpu-blocks-override"),
    kv_transfer_config: str | None = typer.Option(None, "--kv-transfer-config"),
    ec_transfer_config: str | None = typer.Option(None, "--ec-transfer-config"),
    time_scale: float = typer.Option(
        1.0, "--time-scale", help="Run K times slower than modelled; report modelled."
    ),
    start_time_scale: float = typer.Option(
        0.0,
        "--start-time-scale",
        help="Open the port after the modelled start x --time-scale x K; 0: at once.",
    ),
    start_cache: str = typer.Option(
        "warm", "--start-cache", help="warm (a restart on the same node) or cold (a first start)."
    ),
    kv_link_gbps: float | None = typer.Option(
        None, "--kv-link-gbps", help="Modelled KV link, GB/s."
    ),
    kv_wire_scale: float = typer.Option(
        1 / 1024, "--kv-wire-scale", help="Bytes on the wire per modelled KV byte."
    ),
    heartbeat_s: float = typer.Option(
        3.0,
        "--registration-interval",
        hidden=True,
        help="Seconds between ZMQ registrations (tests only).",
    ),
    log_level: str = typer.Option("warning", "--log-level"),
    disable_log_stats: bool = typer.Option(
        False, "--disable-log-stats", help="No periodic stats line (as vLLM's flag)."
    ),
    enable_per_request_metrics: bool = typer.Option(
        False,
        "--enable-per-request-metrics",
        help="Each response's `metrics` carries its engine timing (as vLLM 0.32's flag).",
    ),
    fault_injection: bool = typer.Option(
        False,
        "--enable-fault-injection",
        envvar="PDCTL_SIM_FAULT_INJECTION",
        hidden=True,
        help="Serve POST /_fault to make this instance misbehave (make chaos only).",
    ),
    kv_stale_peer: str = typer.Option(
        "heal",
        "--kv-stale-peer",
        envvar="PDCTL_SIM_KV_STALE_PEER",
        help="A decode meeting a restarted prefill's new agent: heal (handshake again, as vLLM "
        "with PR 50047), or keep the stale one and hang or fail every transfer through it, "
        "as released NIXL/MoRIIO do.",
    ),
    moriio_metrics: str = typer.Option(
        "stats",
        "--moriio-metrics",
        envvar="PDCTL_SIM_MORIIO_METRICS",
        help="stats: export vllm:moriio_* transfer metrics as newer vLLM does; none: as older "
        "MoRIIO (vLLM 0.16), which exports none.",
    ),
    render: bool = typer.Option(False, "--render", help="Serve the render tier only, no engine."),
    frontend_cost: str | None = typer.Option(
        None,
        "--frontend-cost",
        envvar="PDCTL_SIM_FRONTEND_COST",
        help="The modelled API server's CPU (process_cpu_seconds_total): BASE_MS,PROMPT_US,"
        "OUTPUT_US per request, text prompt token and output token. Default: vLLM's, "
        "measured by make bench-frontend.",
    ),
) -> None:
    try:
        _check_extra(list(ctx.args))
        if enable_per_request_metrics and disable_log_stats:  # vLLM 0.32's cli_args check
            raise EngineConfigError(
                "--enable-per-request-metrics requires engine statistics logging; remove "
                "--disable-log-stats to enable per-request metrics."
            )
        settings = _settings(
            model=model or model_arg,
            host=host,
            port=port,
            served=served_model_name,
            model_profile=model_profile,
            hardware=hardware,
            tp=tensor_parallel_size,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            block_size=block_size,
            max_model_len=max_model_len,
            prefix=enable_prefix_caching,
            gpu_util=gpu_memory_utilization,
            blocks=num_gpu_blocks_override,
            kv_transfer_config=kv_transfer_config,
            time_scale=time_scale,
            kv_link_gbps=kv_link_gbps,
            kv_wire_scale=kv_wire_scale,
            heartbeat_s=heartbeat_s,
        )
        settings = replace(
            settings,
            **start_settings(start_time_scale, start_cache),
            fault_injection=fault_injection,
            kv_stale_peer=_stale_peer(kv_stale_peer),
            moriio_metrics=_moriio_metrics(moriio_metrics),
            ec=ec_settings(
                ec_transfer_config, settings.model_profile
            ),  # simulator/config/encoder.py
            log_stats_interval_s=None if disable_log_stats else stats_log.interval_from(os.environ),
            per_request_metrics=enable_per_request_metrics,
        )
        if frontend_cost is not None:
            settings = replace(settings, frontend_cost=_frontend_cost(frontend_cost))
        settings = replace(settings, tokenizer=_tokenizer(tokenizer, model or model_arg))
    except (EngineConfigError, profiles.UnknownProfile) as exc:
        typer.echo(f"pdctl sim: error: {exc}", err=True)
        raise typer.Exit(2) from None
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        run_render(settings) if render else run(settings)  # render: simulator/server/render.py
    except OSError as exc:  # a port taken: say which setting chose it, not a traceback
        typer.echo(
            f"pdctl sim: error: cannot listen ({exc.strerror or exc}); the ports come "
            f"from {listen_sources(settings)}",
            err=True,
        )
        raise typer.Exit(1) from None


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


def _settings(
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
    profile = _model_profile(model, model_profile)
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
        kv_hold_timeout_s=_hold_timeout(kv, os.environ),
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


def _hold_timeout(kv, env) -> float:
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


def run(settings: EngineSettings) -> None:
    from aiohttp import web

    from simulator.server.app import create_app
    from simulator.server.start_delay import wait_modelled_start

    use_uvloop()
    print(
        f"pdctl sim: {settings.model_profile} on {settings.tensor_parallel_size} x "
        f"{settings.hardware} (time scale {settings.time_scale}) serving "
        f"{settings.served_model_name!r} at http://{settings.host}:{settings.port}/v1",
        flush=True,
    )
    if settings.defaults_applied:
        print(f"pdctl sim: vLLM's defaults: {settings.defaults_applied}", flush=True)
    wait_modelled_start(settings)
    web.run_app(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        print=None,
        access_log=None,
        handle_signals=True,
        # vLLM aborts a request whose client went away even while it waits (its
        # with_cancellation); without this only a streaming write would notice.
        handler_cancellation=True,
    )
