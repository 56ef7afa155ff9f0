"""The stand-in engine's HTTP server: vLLM's OpenAI-compatible surface over the scheduler.

`create_app(settings)` builds everything in the app's startup (engine loop, KV agent,
registration) and tears it down on cleanup; nothing happens at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from domain import profiles
from domain.workload import tokenizer
from simulator.config import faults
from simulator.config.engine import EngineSettings
from simulator.config.faults import Faults
from simulator.engine.request import EngineRequest
from simulator.engine.scheduler import Scheduler, SchedulerConfig
from simulator.engine.stats_log import log_stats
from simulator.engine.wall_clock import EngineLoop
from simulator.kv.handoff import plan_handoff
from simulator.kv.params import before_submit
from simulator.kv.transfer import KVTransferAgent
from simulator.metrics.export import EngineMetrics, registry_for
from simulator.model.frontend_clock import FrontendClock
from simulator.model.timing import TimingModel
from simulator.protocol import format as openai_format
from simulator.protocol import request as openai_request
from simulator.protocol.format import (
    ResponseWriter,
    internal_request_id,
    system_fingerprint,
)
from simulator.protocol.request import RequestError, error_body
from simulator.server import pd_role
from simulator.server.answers import stream_response, whole_response
from simulator.server.encoder_stage import encoder_for
from simulator.server.registration import heartbeat, registration_message
from simulator.server.state import STATE, SimState, json_response

if TYPE_CHECKING:
    from simulator.protocol.model_tokenizer import ModelTokenizer


def natural_length(prompt_ids: list[int]) -> int:
    """Where the stand-in's text would end on its own (EOS) unless ignore_eos is set."""
    return 32 + tokenizer.prompt_seed(prompt_ids) % 480


def _prompt_tokenizer(settings: EngineSettings) -> ModelTokenizer | None:
    if settings.tokenizer is None:
        return None
    from simulator.protocol.model_tokenizer import ModelTokenizer  # `tokenizers` only if asked

    return ModelTokenizer(Path(settings.tokenizer))


def build_scheduler(settings: EngineSettings) -> Scheduler:
    timing = TimingModel(
        profiles.model(settings.model_profile),
        profiles.hardware(settings.hardware),
        settings.tensor_parallel_size,
    )
    config = SchedulerConfig(
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        block_size=settings.block_size,
        num_gpu_blocks=settings.num_gpu_blocks_override or 0,
        enable_prefix_caching=settings.enable_prefix_caching,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        kv_hold_timeout_s=settings.kv_hold_timeout_s,
    )
    return Scheduler(timing, config)


def create_app(settings: EngineSettings) -> web.Application:
    app = web.Application(client_max_size=32 * 1024 * 1024)
    app.router.add_get("/health", _health)
    app.router.add_get("/version", _version)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/metrics", _metrics)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/chat/completions", _chat)
    if settings.fault_injection:
        faults.add_routes(app, Faults())
    if settings.kv is not None and settings.kv.pd_role is not None:
        pd_role.install(app, settings.kv.pd_role, lambda: app[STATE].engine.scheduler.idle)
    app.cleanup_ctx.append(_lifespan(settings))
    return app


def _lifespan(settings: EngineSettings):
    async def lifespan(app: web.Application):
        scheduler = build_scheduler(settings)
        kv = settings.kv
        metrics = EngineMetrics(
            scheduler,
            settings.served_model_name,
            settings.model_len,
            settings.time_scale,
            # Real vLLM exposes vllm:nixl_* for NixlConnector, newer vLLM vllm:moriio_* too.
            transfer_prefix=settings.transfer_metrics_prefix,
            kv_role=kv.role if kv is not None else None,
        )
        engine = EngineLoop(scheduler, settings.time_scale)
        injected = app.get(faults.FAULTS)
        agent = KVTransferAgent(settings, kv, engine, metrics, injected) if kv is not None else None

        def on_step(out) -> None:
            metrics.on_step(out)
            metrics.loop_lag_s = engine.last_lag_s

        engine._on_step = on_step
        if agent is not None:
            engine._on_awaiting_kv = agent.on_awaiting_kv
            engine._on_kv_expired = agent.kv_expired
            await agent.start()
        engine.start()
        tasks = []
        if (
            kv is not None
            and kv.proxy_ip is not None  # kv.registers, spelled out for the type checker
            and kv.proxy_ping_port is not None
            and agent is not None
        ):
            message = registration_message(settings, kv, agent.advertised_host)
            tasks.append(
                asyncio.create_task(
                    heartbeat(
                        message,
                        kv.proxy_ip,
                        kv.proxy_ping_port,
                        settings.registration_interval_s,
                        injected.heartbeat if injected is not None else None,
                    )
                )
            )
        if settings.log_stats_interval_s is not None:
            tasks.append(asyncio.create_task(log_stats(scheduler, settings.log_stats_interval_s)))
        encoder = encoder_for(settings, engine.now)
        frontend = FrontendClock(settings.frontend_wall_cost)
        app[STATE] = SimState(
            settings,
            engine,
            metrics,
            registry_for(metrics, frontend),
            agent,
            int(time.time()),
            system_fingerprint(_config_key(settings)),
            injected,
            encoder,
            frontend,
            _prompt_tokenizer(settings),
        )
        if encoder is not None:
            app[STATE].registry.register(encoder)
        yield
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await engine.stop()
        if agent is not None:
            await agent.stop()

    return lifespan


def _config_key(settings: EngineSettings) -> str:
    """What the fingerprint hashes: the engine's config, not its per-start engine id."""
    s = settings
    return (
        f"{s.model_profile}|{s.served_model_name}|{s.hardware}|{s.model_len}|"
        f"{s.tensor_parallel_size}|{s.max_num_seqs}|{s.max_num_batched_tokens}|{s.kv!r}"
    )


async def _health(request: web.Request) -> web.Response:
    injected = request.app.get(faults.FAULTS)
    if injected is not None:
        await injected.before_health()
    return web.Response(status=200, headers={"Vary": "Origin"})


async def _version(request: web.Request) -> web.Response:
    return json_response({"version": openai_format.VLLM_VERSION})


async def _models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    s = state.settings
    return json_response(
        openai_format.models_body(s.served_model_name, s.model_profile, s.model_len, state.created)
    )


async def _metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.Response(
        body=generate_latest(state.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completion")


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


def _error(err: RequestError) -> web.Response:
    return json_response(error_body(err), status=err.status)


async def _generate(request: web.Request, kind: str) -> web.StreamResponse:
    state = request.app[STATE]
    settings = state.settings
    try:
        gen = openai_request.parse(
            kind,
            await request.read(),
            request.headers.get("Content-Type", ""),
            settings.served_model_name,
            settings.model_len,
            state.encoder.vision_tokens if state.encoder is not None else 0,
            state.prompt_tokenizer,
        )
        writer = ResponseWriter(gen, state.fingerprint)
        request_id = internal_request_id(kind, writer.id)
        handoff = plan_handoff(gen.kv_transfer_params, settings.kv, request_id, request.headers)
    except RequestError as err:
        state.frontend.request(0)
        return _error(err)
    state.frontend.request(len(gen.prompt_token_ids) if gen.text_prompt else 0)
    fault = state.faults.for_requests() if state.faults is not None else None
    if fault is not None:
        return await faults.answer(request, fault, gen.stream, writer)
    engine = state.engine
    arrival = engine.now()  # the encoder's time counts in TTFT, as inside vLLM's step
    if (encoder := state.encoder) is not None:
        if gen.images and handoff.remote is None:  # a decode leg's prompt arrives as KV
            await encoder.encode(gen.images)
        if encoder.encode_only:  # vLLM 0.32: an ec_producer runs no language model
            return json_response(writer.body("", "stop", len(gen.prompt_token_ids), 0, None))
    stop_after = None if gen.ignore_eos else natural_length(gen.prompt_token_ids)
    ereq = EngineRequest(
        request_id,
        gen.prompt_token_ids,
        gen.max_tokens,
        arrival,
        kv_role=handoff.role,
        stop_after=stop_after,
    )
    await before_submit(state.agent, ereq, handoff)  # simulator/kv/params.py
    try:
        queue = engine.submit(ereq)
    except ValueError as exc:
        return _error(RequestError(str(exc)))
    if handoff.remote is not None and state.agent is not None:
        # Before the engine loop next runs (no await since submit): it may give the
        # request its blocks and ask where its KV comes from.
        state.agent.expect(request_id, handoff.remote)
    try:
        if gen.stream:
            return await stream_response(request, state, gen, writer, ereq, handoff, queue)
        return await whole_response(state, gen, writer, ereq, handoff, queue)
    finally:
        state.frontend.output(ereq.num_output_tokens)
        if not ereq.is_finished:
            engine.abort(ereq.request_id)  # the client went away
        if state.agent is not None:
            state.agent.forget(ereq.request_id, handoff.key)
        state.metrics.forget(ereq.request_id)
        engine.done(ereq.request_id)
