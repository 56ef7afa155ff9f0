"""The stand-in engine's HTTP server: vLLM's OpenAI-compatible surface over the scheduler.

`create_app(settings)` builds everything in the app's startup (engine loop, KV agent,
registration) and tears it down on cleanup; nothing happens at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from domain import profiles
from domain.workload import tokenizer
from simulator.config import faults
from simulator.config.engine import EngineSettings
from simulator.config.faults import Faults
from simulator.engine.request import EngineRequest, kv_transfer_stats, per_request_metrics
from simulator.engine.scheduler import Scheduler, SchedulerConfig
from simulator.engine.stats_log import log_stats
from simulator.engine.wall_clock import FINISHED, EngineLoop
from simulator.kv.handoff import Handoff, plan_handoff
from simulator.kv.params import before_submit, response_params
from simulator.kv.transfer import KVTransferAgent
from simulator.metrics.export import EngineMetrics, registry_for
from simulator.model.frontend_clock import FrontendClock
from simulator.model.timing import TimingModel
from simulator.protocol import format as openai_format
from simulator.protocol import request as openai_request
from simulator.protocol.format import (
    DONE,
    ResponseWriter,
    compact_json,
    internal_request_id,
    system_fingerprint,
)
from simulator.protocol.request import RequestError, error_body
from simulator.server import pd_role
from simulator.server.encoder_stage import EncoderStage, encoder_for
from simulator.server.registration import heartbeat, registration_message

if TYPE_CHECKING:
    from simulator.protocol.model_tokenizer import ModelTokenizer

log = logging.getLogger("pdctl.sim")
# vLLM's headers (uvicorn, and Vary from its CORS middleware), all but `server`: the stand-in
# keeps aiohttp's there, so that a person can still tell the two apart.
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Vary": "Origin"}
JSON_HEADERS = {"Content-Type": "application/json", "Vary": "Origin"}


@dataclass(slots=True)
class SimState:
    settings: EngineSettings
    engine: EngineLoop
    metrics: EngineMetrics
    registry: CollectorRegistry
    agent: KVTransferAgent | None
    created: int
    fingerprint: str
    faults: Faults | None = None  # only with --enable-fault-injection
    encoder: EncoderStage | None = (
        None  # a multimodal profile's (simulator/server/encoder_stage.py)
    )
    # vLLM's API server CPU, modelled (simulator/model/frontend_clock.py)
    frontend: FrontendClock = field(default_factory=FrontendClock)
    prompt_tokenizer: ModelTokenizer | None = None  # --tokenizer's; None: the estimate


STATE = web.AppKey("state", SimState)


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


def _json(obj: object, status: int = 200) -> web.Response:
    return web.Response(body=compact_json(obj).encode(), status=status, headers=JSON_HEADERS)


async def _health(request: web.Request) -> web.Response:
    injected = request.app.get(faults.FAULTS)
    if injected is not None:
        await injected.before_health()
    return web.Response(status=200, headers={"Vary": "Origin"})


async def _version(request: web.Request) -> web.Response:
    return _json({"version": openai_format.VLLM_VERSION})


async def _models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    s = state.settings
    return _json(
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
    return _json(error_body(err), status=err.status)


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
            return _json(writer.body("", "stop", len(gen.prompt_token_ids), 0, None))
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
            return await _stream(request, state, gen, writer, ereq, handoff, queue)
        return await _whole(state, gen, writer, ereq, handoff, queue)
    finally:
        state.frontend.output(ereq.num_output_tokens)
        if not ereq.is_finished:
            engine.abort(ereq.request_id)  # the client went away
        if state.agent is not None:
            state.agent.forget(ereq.request_id, handoff.key)
        state.metrics.forget(ereq.request_id)
        engine.done(ereq.request_id)


def _kv_params(state: SimState, ereq: EngineRequest, handoff: Handoff) -> dict | None:
    s = state.settings
    return response_params(state.agent, ereq, handoff, s.engine_id, s.tensor_parallel_size)


def _transfer_stats(state: SimState, ereq: EngineRequest) -> dict:
    """The decode's own per-request transfer figures, as a top-level field clients ignore."""
    stats = kv_transfer_stats(ereq, state.engine.time_scale)
    return {} if stats is None else {"kv_transfer_stats": stats}


def _timing(state: SimState, ereq: EngineRequest, stream: bool) -> dict:
    """`metrics` as vLLM 0.32 sends it with --enable-per-request-metrics: on a whole
    response every field (null where unknown; the key is null without the flag); on a
    stream only on the usage chunk, its null fields left out (exclude_none)."""
    if not state.settings.per_request_metrics:
        return {} if stream else {"metrics": None}
    timing = per_request_metrics(ereq, state.engine.time_scale)
    if stream:
        return {"metrics": {k: v for k, v in timing.items() if v is not None}}
    return {"metrics": timing}


def _failure(state: SimState, ereq: EngineRequest) -> str:
    why = state.agent.failures.pop(ereq.request_id, None) if state.agent else None
    return (
        f"KV transfer for request {ereq.request_id} failed"
        + (f": {why}" if why else "")
        + " (kv_load_failure_policy=fail)"
    )


def output_seed(ereq: EngineRequest) -> int:
    """What seeds a request's tokens: its prompt, and on a decode leg the KV bytes it
    received (0 delta when they were right: exactly the colocated answer)."""
    return tokenizer.prompt_seed(ereq.prompt_token_ids) ^ ereq.kv_seed_delta


def _texts(ereq: EngineRequest, start: int, end: int, seed: int | None = None) -> list[str]:
    seed = output_seed(ereq) if seed is None else seed
    ids = tokenizer.output_token_ids(ereq.prompt_token_ids, start, end - start, seed)
    return [tokenizer.token_text(t, start + i == 0) for i, t in enumerate(ids)]


def _failed(ereq: EngineRequest) -> bool:
    return ereq.finish_reason in ("error", "abort")


async def _whole(state, gen, writer: ResponseWriter, ereq, handoff, queue) -> web.Response:
    while await queue.get() != FINISHED:
        pass
    if _failed(ereq):
        # vLLM answers a failed KV load with a bare 500 "Internal server error" (fixture
        # decode_bogus_engine_id.json); the reason goes to the log, as vLLM's does.
        log.warning("%s", _failure(state, ereq))
        return _json(
            {
                "error": {
                    "message": "Internal server error",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                }
            },
            status=500,
        )
    text = "".join(_texts(ereq, 0, ereq.num_output_tokens))
    body = writer.body(
        text,
        ereq.finish_reason or "length",
        ereq.prompt_len,
        ereq.num_output_tokens,
        _kv_params(state, ereq, handoff),
    )
    return _json({**body, **_timing(state, ereq, False), **_transfer_stats(state, ereq)})


async def _stream(
    request, state, gen, writer: ResponseWriter, ereq, handoff, queue
) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    # vLLM sends a chat stream's role chunk with its first output (the first token, after
    # any KV transfer), not when the stream opens; none before an error instead of a token.
    role = writer.role_chunk() if gen.kind == "chat" else b""
    sent = 0
    ended = False  # the finish_reason went out on the last token's chunk, as vLLM sends it
    seed: int | None = None  # known once the KV has arrived (the first token follows it)
    while not ended:
        item = await queue.get()
        if item == FINISHED:
            break
        if item <= sent:
            continue
        seed = output_seed(ereq) if seed is None else seed
        texts = _texts(ereq, sent, item, seed)
        sent = item
        # The engine finishes a request in the step that makes its last token, so the
        # request already says so when that token arrives.
        ended = ereq.is_finished and not _failed(ereq) and item >= ereq.num_output_tokens
        last = texts.pop() if ended else None
        chunks = [writer.token_chunk(text) for text in texts]
        if last is not None:
            chunks.append(
                writer.last_chunk(
                    last, ereq.finish_reason or "length", _kv_params(state, ereq, handoff)
                )
            )
        await response.write(role + b"".join(chunks))
        role = b""
    if not ended and _failed(ereq):
        await response.write(writer.error_chunk(_failure(state, ereq)))
    else:
        if not ended:  # finished without a token of its own: an empty closing chunk
            await response.write(
                role
                + writer.last_chunk(
                    "", ereq.finish_reason or "length", _kv_params(state, ereq, handoff)
                )
            )
        if gen.include_usage:
            await response.write(
                writer.usage_chunk(
                    ereq.prompt_len,
                    ereq.num_output_tokens,
                    {**_timing(state, ereq, True), **_transfer_stats(state, ereq)},
                )
            )
    await response.write(DONE)
    await response.write_eof()
    return response
