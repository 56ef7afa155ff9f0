"""`pdctl sim`: run the stand-in engine with vLLM's flags (ARCHITECTURE.md, "One config")."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

import typer

from domain import profiles
from domain.engine.frontend_cost import FrontendCost
from simulator.config.encoder import ec_settings
from simulator.config.engine import EngineConfigError, EngineSettings
from simulator.engine import stats_log
from simulator.flag_settings import listen_sources, settings_from_flags, start_settings
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


MORIIO_METRICS = ("stats", "none")


def register(app: typer.Typer) -> None:
    app.command(
        "sim",
        help="Run a stand-in vLLM engine: vLLM's HTTP API and metrics, simulated GPU timing.",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(sim)


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
        settings = settings_from_flags(
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
