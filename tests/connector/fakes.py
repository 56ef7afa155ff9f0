"""A small fake vLLM upstream (prefill and decode behaviour) and a harness to run the proxy."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import zmq
from aiohttp import web
from multidict import CIMultiDict
from pydantic import ValidationError

from connector.proxy import PROXY_KEY, Proxy
from connector.server import bound_port, start
from connector.settings import FlagInstance, ProxySettings

GARBAGE = b"\x8f\x00<html>upstream exploded</html>"


def run(coro: Any, timeout: float = 15.0) -> Any:
    """Run one async test body with a hard bound."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


@dataclass
class Seen:
    path: str
    body: dict[str, Any]
    headers: CIMultiDict[str]
    at: float
    kind: str  # prefill | decode | whole


@dataclass
class FakeEngine:
    """Answers like vLLM: a prefill (do_remote_decode) returns kv_transfer_params; anything
    else streams `max_tokens` tokens as SSE chunks (a final usage chunk when include_usage)."""

    name: str = "engine"
    prefill_status: int = 200
    prefill_delay: float = 0.0
    prefill_delays: list[float] = field(default_factory=list)  # per prefill request, then above
    return_params: bool = True
    decode_status: int = 200
    decode_statuses: list[int] = field(default_factory=list)  # per decode request, then above
    decode_first_delay: float = 0.0
    first_delays: list[float] = field(default_factory=list)  # per decode request, then the above
    token_delay: float = 0.0
    die_after: int | None = None  # decode: drop the connection after this many tokens
    hang_after: int | None = None  # decode: go silent after this many tokens
    garbage_after: int | None = None  # decode: 200, then bytes that are not JSON after N tokens
    prefill_garbage: bool = False  # prefill: 200 with a body that is not JSON
    stream_type: str = "text/event-stream; charset=utf-8"
    seen: list[Seen] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None

    def params(self) -> dict[str, Any]:
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": [[1, 2, 3]],
            "remote_engine_id": f"engine-{self.name}",
            "remote_request_id": "cmpl-abc",
            "remote_host": "127.0.0.1",
            "remote_port": 5600,
            "tp_size": 1,
        }

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        params = body.get("kv_transfer_params") or {}
        kind = (
            "prefill"
            if params.get("do_remote_decode")
            else ("decode" if params.get("do_remote_prefill") else "whole")
        )
        self.seen.append(
            Seen(request.path, body, CIMultiDict(request.headers), time.monotonic(), kind)
        )
        try:
            if kind == "prefill":
                return await self._prefill(request, body)
            return await self._decode(request, body)
        except asyncio.CancelledError:
            self.cancelled.append(kind)
            raise
        except ConnectionResetError:
            self.cancelled.append(kind)
            raise

    async def _prefill(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        delays = self.prefill_delays
        await asyncio.sleep(delays.pop(0) if delays else self.prefill_delay)
        if self.prefill_garbage:
            return web.Response(body=GARBAGE, content_type="application/json")
        if self.prefill_status != 200:
            return web.json_response(
                {
                    "error": {
                        "message": "prefill exploded",
                        "type": "InternalServerError",
                        "code": self.prefill_status,
                    }
                },
                status=self.prefill_status,
            )
        answer: dict[str, Any] = {
            "id": "cmpl-p",
            "object": "text_completion",
            "created": 1,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "text": " first",
                    "logprobs": None,
                    "finish_reason": "length",
                    "stop_reason": None,
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        }
        if self.return_params:
            answer["kv_transfer_params"] = self.params()
        self.finished.append("prefill")
        return web.json_response(answer)

    def _chunk(self, body: dict[str, Any], i: int, chat: bool, last: bool) -> bytes:
        finish = "length" if last else None
        if chat:
            choice = {
                "index": 0,
                "delta": {"content": f" w{i}"},
                "logprobs": None,
                "finish_reason": finish,
            }
            obj = "chat.completion.chunk"
        else:
            choice = {
                "index": 0,
                "text": f" w{i}",
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
            obj = "text_completion"
        chunk = {
            "id": "cmpl-d",
            "object": obj,
            "created": 1,
            "model": body["model"],
            "choices": [choice],
            "usage": None,
        }
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    async def _decode(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        await asyncio.sleep(
            self.first_delays.pop(0) if self.first_delays else self.decode_first_delay
        )
        status = self.decode_statuses.pop(0) if self.decode_statuses else self.decode_status
        if status != 200:
            return web.json_response({"error": {"message": "decode exploded"}}, status=status)
        n = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        chat = request.path.endswith("/chat/completions")
        if not body.get("stream"):
            if self.garbage_after is not None:
                return web.Response(body=GARBAGE, content_type="application/json")
            await asyncio.sleep(n * self.token_delay)  # the whole answer is generated first
            text = "".join(f" w{i}" for i in range(n))
            choice = (
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length",
                }
                if chat
                else {"index": 0, "text": text, "finish_reason": "length"}
            )
            return web.json_response(
                {
                    "id": "cmpl-d",
                    "object": "chat.completion" if chat else "text_completion",
                    "created": 1,
                    "model": body["model"],
                    "choices": [choice],
                    "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n},
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": self.stream_type})
        await resp.prepare(request)
        for i in range(n):
            if self.garbage_after is not None and i == self.garbage_after:
                await resp.write(b"data: " + GARBAGE + b"\n\n")
            if self.die_after is not None and i == self.die_after:
                assert request.transport is not None
                request.transport.close()
                return resp
            if self.hang_after is not None and i == self.hang_after:
                await asyncio.sleep(30)
            await resp.write(self._chunk(body, i, chat, i == n - 1))
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "id": "cmpl-d",
                "object": "text_completion",
                "created": 1,
                "model": body["model"],
                "choices": [],
                "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n},
            }
            await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        self.finished.append("decode")
        await resp.write_eof()
        return resp

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/completions", self.handle)
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{bound_port(self._runner)}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def kinds(self) -> list[str]:
        return [s.kind for s in self.seen]


@contextlib.asynccontextmanager
async def engines(*fakes: FakeEngine) -> AsyncIterator[tuple[FakeEngine, ...]]:
    for fake in fakes:
        await fake.start()
    try:
        yield fakes
    finally:
        for fake in fakes:
            await fake.stop()


@contextmanager
def registry_dealer(port: int | None, sndhwm: int | None = None) -> Iterator[zmq.Socket]:
    """A ZMQ DEALER on a proxy's registry port, as an engine's heartbeat sender uses."""
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    if sndhwm is not None:
        dealer.setsockopt(zmq.SNDHWM, sndhwm)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    try:
        yield dealer
    finally:
        dealer.close(linger=0)
        ctx.term()


def settings_for(
    prefills: list[FakeEngine] = (),
    decodes: list[FakeEngine] = (),
    **kwargs: Any,
) -> ProxySettings:
    defaults: dict[str, Any] = {
        "port": 0,
        "registry_port": None,
        "health_interval": None,
        "startup_grace": 0.0,
    }
    defaults.update(kwargs)
    return ProxySettings(
        **{
            "prefill": tuple(FlagInstance(p.url) for p in prefills),
            "decode": tuple(FlagInstance(d.url) for d in decodes),
            **defaults,
        }
    )


def refused_at(**kwargs: Any) -> str:
    """The field settings_for(**kwargs) is refused at."""
    with pytest.raises(ValidationError) as err:
        settings_for(**kwargs)
    return ProxySettings.error_field(err.value.errors()[0])


@contextlib.asynccontextmanager
async def running(settings: ProxySettings) -> AsyncIterator[tuple[str, Proxy]]:
    runner, app = await start(settings)
    try:
        yield f"http://127.0.0.1:{bound_port(runner)}", app[PROXY_KEY]
    finally:
        await runner.cleanup()


def sse_events(raw: bytes) -> list[Any]:
    """The data payloads of an SSE body: parsed JSON, or the string "[DONE]"."""
    out: list[Any] = []
    for block in raw.split(b"\n\n"):
        if block.startswith(b"data: "):
            payload = block[6:]
            out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return out


def completion(max_tokens: int = 5, stream: bool = True, **extra: Any) -> dict[str, Any]:
    body = {"model": "tiny", "prompt": "hello there", "max_tokens": max_tokens, "stream": stream}
    body.update(extra)
    return body


@contextlib.asynccontextmanager
async def proxied(
    prefills: list[FakeEngine], decodes: list[FakeEngine], **kwargs: Any
) -> AsyncIterator[tuple[str, Proxy]]:
    """The fakes started (those without a URL yet) and a proxy in front of them."""
    started = [f for f in (*prefills, *decodes) if not f.url]
    async with engines(*started), running(settings_for(prefills, decodes, **kwargs)) as ran:
        yield ran
