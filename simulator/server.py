"""The stand-in engine's HTTP server: vLLM's OpenAI-compatible surface over the scheduler.

`create_app(settings)` builds everything in the app's startup (engine loop, KV agent,
registration) and tears it down on cleanup; nothing happens at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from simulator import openai_format, profiles, tokenizer
from simulator.engine_config import EngineSettings
from simulator.engine_loop import FINISHED, EngineLoop
from simulator.handoff import Handoff, plan_handoff, prefill_response_params
from simulator.kv_transfer import KVTransferAgent
from simulator.metrics import EngineMetrics, registry_for
from simulator.openai_format import DONE, RequestError, ResponseWriter, error_body
from simulator.registration import heartbeat, registration_message
from simulator.request import EngineRequest, KVRole
from simulator.scheduler import Scheduler, SchedulerConfig
from simulator.timing import TimingModel

log = logging.getLogger("pdctl.sim")
VERSION = "0.32.0"
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


@dataclass(slots=True)
class SimState:
    settings: EngineSettings
    engine: EngineLoop
    metrics: EngineMetrics
    registry: object
    agent: KVTransferAgent | None
    created: int


STATE = web.AppKey("state", SimState)


def natural_length(prompt_ids: list[int]) -> int:
    """Where the stand-in's text would end on its own (EOS) unless ignore_eos is set."""
    return 32 + tokenizer.prompt_seed(prompt_ids) % 480


def build_scheduler(settings: EngineSettings) -> Scheduler:
    timing = TimingModel(profiles.model(settings.model_profile),
                         profiles.hardware(settings.hardware), settings.tensor_parallel_size)
    config = SchedulerConfig(
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
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
    app.cleanup_ctx.append(_lifespan(settings))
    return app


def _lifespan(settings: EngineSettings):
    async def lifespan(app: web.Application):
        scheduler = build_scheduler(settings)
        kv = settings.kv
        metrics = EngineMetrics(scheduler, settings.served_model_name, settings.model_len,
                                settings.time_scale, with_nixl=kv is not None)
        engine = EngineLoop(scheduler, settings.time_scale)
        agent = KVTransferAgent(settings, kv, engine, metrics) if kv is not None else None

        def on_step(out) -> None:
            metrics.on_step(out)
            metrics.loop_lag_s = engine.last_lag_s

        engine._on_step = on_step
        if agent is not None:
            engine._on_awaiting_kv = agent.on_awaiting_kv
            await agent.start()
        engine.start()
        beat = None
        if kv is not None and kv.registers and agent is not None:
            message = registration_message(settings, kv, agent.advertised_host)
            beat = asyncio.create_task(heartbeat(message, kv.proxy_ip, kv.proxy_ping_port,
                                               settings.registration_interval_s))
        app[STATE] = SimState(settings, engine, metrics, registry_for(metrics), agent,
                              int(time.time()))
        yield
        if beat is not None:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        await engine.stop()
        if agent is not None:
            await agent.stop()

    return lifespan


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _version(request: web.Request) -> web.Response:
    return web.json_response({"version": VERSION})


async def _models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    s = state.settings
    return web.json_response(openai_format.models_body(s.served_model_name, s.model_len,
                                                       state.created))


async def _metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.Response(body=generate_latest(state.registry),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completion")


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


def _error(err: RequestError) -> web.Response:
    return web.json_response(error_body(err), status=err.status)


async def _generate(request: web.Request, kind: str) -> web.StreamResponse:
    state = request.app[STATE]
    settings = state.settings
    try:
        gen = openai_format.parse(kind, await request.read(), settings.served_model_name,
                                  settings.model_len)
        writer = ResponseWriter(gen)
        handoff = plan_handoff(gen.kv_transfer_params, settings.kv, writer.id, request.headers)
    except RequestError as err:
        return _error(err)
    engine = state.engine
    stop_after = None if gen.ignore_eos else natural_length(gen.prompt_token_ids)
    ereq = EngineRequest(writer.id, gen.prompt_token_ids, gen.max_tokens, engine.now(),
                         kv_role=handoff.role, stop_after=stop_after)
    if handoff.remote is not None and state.agent is not None:
        state.agent.expect(writer.id, handoff.remote)
    try:
        queue = engine.submit(ereq)
    except ValueError as exc:
        return _error(RequestError(str(exc)))
    try:
        if gen.stream:
            return await _stream(request, state, gen, writer, ereq, handoff, queue)
        return await _whole(state, gen, writer, ereq, handoff, queue)
    finally:
        if not ereq.is_finished:
            engine.abort(ereq.request_id)  # the client went away
        if state.agent is not None:
            state.agent.forget(ereq.request_id)
        engine.done(ereq.request_id)


def _kv_params(state: SimState, ereq: EngineRequest, handoff: Handoff,
               gen: openai_format.GenerationRequest) -> dict | None:
    """A prefill leg that stopped on length hands its KV on (vLLM returns params only then)."""
    agent = state.agent
    if handoff.role is not KVRole.REMOTE_DECODE or agent is None or handoff.key is None:
        return None
    if ereq.finish_reason != "length":
        return None
    agent.prefill_done(handoff.key, ereq)
    s = state.settings
    return prefill_response_params(s.kv, s.engine_id, agent.advertised_host, ereq.request_id,
                                   handoff.key, list(ereq.block_ids), ereq.prompt_len,
                                   s.tensor_parallel_size, gen.kv_transfer_params or {})


def _failure(state: SimState, ereq: EngineRequest) -> str:
    why = state.agent.failures.pop(ereq.request_id, None) if state.agent else None
    return (f"KV transfer for request {ereq.request_id} failed"
            + (f": {why}" if why else "") + " (kv_load_failure_policy=fail)")


def _texts(ereq: EngineRequest, start: int, end: int, seed: int | None = None) -> list[str]:
    ids = tokenizer.output_token_ids(ereq.prompt_token_ids, start, end - start, seed)
    return [tokenizer.token_text(t, start + i == 0) for i, t in enumerate(ids)]


async def _whole(state, gen, writer: ResponseWriter, ereq, handoff, queue) -> web.Response:
    while await queue.get() != FINISHED:
        pass
    if ereq.finish_reason in ("error", "abort"):
        return web.json_response(
            {"error": {"message": _failure(state, ereq), "type": "InternalServerError",
                       "param": None, "code": 500}}, status=500)
    text = "".join(_texts(ereq, 0, ereq.num_output_tokens))
    body = writer.body(text, ereq.finish_reason or "length", ereq.prompt_len,
                       ereq.num_output_tokens, _kv_params(state, ereq, handoff, gen))
    return web.json_response(body, dumps=_compact)


def _compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


async def _stream(request, state, gen, writer: ResponseWriter, ereq, handoff,
                  queue) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    if gen.kind == "chat":
        await response.write(writer.role_chunk())
    sent = 0
    seed = tokenizer.prompt_seed(ereq.prompt_token_ids)
    while True:
        item = await queue.get()
        if item == FINISHED:
            break
        if item <= sent:
            continue
        chunks = [writer.token_chunk(text) for text in _texts(ereq, sent, item, seed)]
        sent = item
        await response.write(b"".join(chunks))
    if ereq.finish_reason in ("error", "abort"):
        await response.write(writer.error_chunk(_failure(state, ereq)))
    else:
        await response.write(writer.finish_chunk(ereq.finish_reason or "length",
                                                 _kv_params(state, ereq, handoff, gen)))
        if gen.include_usage:
            await response.write(writer.usage_chunk(ereq.prompt_len, ereq.num_output_tokens))
    await response.write(DONE)
    await response.write_eof()
    return response
