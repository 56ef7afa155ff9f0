"""A small real SSE server standing in for vLLM in the bench's tests (loopback, ephemeral port).

The model name picks the behaviour, so one server covers every fault: "ok" streams
`max_tokens` tokens `token_delay` apart, "http-500" refuses, "http-503" has no instance
(as a pdctl proxy whose decode is down answers), "error-event" fails mid-stream,
"cut" drops the connection mid-stream, "no-done" ends without [DONE], "hang" stalls.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from domain.workload.tokenizer import count_tokens, output_token_ids, token_text


@dataclass
class FakeEngine:
    token_delay: float = 0.002
    first_token_delay: float = 0.0
    hang_seconds: float = 5.0
    served_model: str = "ok"
    payloads: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)  # each request's, as sent

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._generate)
        app.router.add_post("/v1/chat/completions", self._generate)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.served_model}]})

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        self.payloads.append(payload)
        self.headers.append(dict(request.headers))
        behaviour = payload.get("model", "ok")
        if behaviour == "http-500":
            return web.json_response(
                {"error": {"message": "engine overloaded", "type": "InternalError"}}, status=500
            )
        if behaviour == "http-503":
            return web.json_response(
                {"error": {"message": "no instance can serve this request", "code": 503}},
                status=503,
                headers={"Retry-After": "1"},
            )
        chat = "messages" in payload
        prompt_tokens = _prompt_tokens(payload)
        count = int(payload["max_tokens"])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if chat:
            await _send(response, _chat_chunk({"role": "assistant", "content": ""}))
        await asyncio.sleep(self.first_token_delay)
        for i, token in enumerate(output_token_ids([prompt_tokens], 0, count)):
            if i:
                await asyncio.sleep(self.token_delay)
            text = token_text(token, first=i == 0)
            await _send(response, _chat_chunk({"content": text}) if chat else _text_chunk(text))
            if behaviour == "error-event" and i == 1:
                await _send(response, {"error": {"message": "KV transfer failed", "code": 500}})
                return response
            if behaviour == "cut" and i == 1:
                request.transport.close()
                return response
            if behaviour == "hang":
                await asyncio.sleep(self.hang_seconds)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": count,
            "total_tokens": prompt_tokens + count,
        }
        await _send(response, {"choices": [], "usage": usage})
        if behaviour != "no-done":
            await response.write(b"data: [DONE]\n\n")
        return response


@asynccontextmanager
async def serving(engine: FakeEngine) -> AsyncIterator[str]:
    """Serve `engine` on 127.0.0.1 in the running loop; yields the base URL."""
    runner = web.AppRunner(engine.app(), shutdown_timeout=0.5, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@contextmanager
def serving_in_thread(engine: FakeEngine) -> Iterator[str]:
    """Serve `engine` from a thread with its own loop, for code that runs its own loop (CLI)."""
    loop = asyncio.new_event_loop()
    ready: asyncio.Future[str] = loop.create_future()
    stop = asyncio.Event()

    async def main() -> None:
        async with serving(engine) as url:
            ready.set_result(url)
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    url = asyncio.run_coroutine_threadsafe(_wait(ready), loop).result(timeout=10)
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        loop.close()


async def _wait(future: asyncio.Future[str]) -> str:
    return await future


def _prompt_tokens(payload: dict[str, Any]) -> int:
    if "messages" in payload:
        return sum(count_tokens(m["content"]) for m in payload["messages"])
    prompt = payload["prompt"]
    return len(prompt) if isinstance(prompt, list) else count_tokens(prompt)


def _text_chunk(text: str) -> dict[str, Any]:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text}]}


def _chat_chunk(delta: dict[str, str]) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


async def _send(response: web.StreamResponse, message: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(message)}\n\n".encode())
