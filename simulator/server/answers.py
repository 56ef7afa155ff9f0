"""A completion's answer once the engine runs it: the whole body, or its SSE stream token by
token, as vLLM sends them (the finish on the last token's chunk, usage and per-request
metrics after, a failed KV load as vLLM reports it), the text seeded by the KV received."""

from __future__ import annotations

import logging

from aiohttp import web

from domain.workload import tokenizer
from simulator.engine.request import EngineRequest, kv_transfer_stats, per_request_metrics
from simulator.engine.wall_clock import FINISHED
from simulator.kv.handoff import Handoff
from simulator.kv.params import response_params
from simulator.protocol.format import DONE, ResponseWriter
from simulator.server.state import SSE_HEADERS, SimState, json_response

log = logging.getLogger("pdctl.sim")


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


async def whole_response(state, gen, writer: ResponseWriter, ereq, handoff, queue) -> web.Response:
    while await queue.get() != FINISHED:
        pass
    if _failed(ereq):
        # vLLM answers a failed KV load with a bare 500 "Internal server error" (fixture
        # decode_bogus_engine_id.json); the reason goes to the log, as vLLM's does.
        log.warning("%s", _failure(state, ereq))
        return json_response(
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
    return json_response({**body, **_timing(state, ereq, False), **_transfer_stats(state, ereq)})


async def stream_response(
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
