"""A NIXL PD proxy built the way vLLM's example proxy is (FastAPI + httpx, one long-lived client
per instance, round-robin, prefill then decode), written from PROTOCOL.md section 3.

The baseline for `make bench-proxy`; not for serving.
usage: python -m benchmarks.proxy.baseline PORT PREFILL_URL DECODE_URL
"""

from __future__ import annotations

import itertools
import sys
import uuid
from contextlib import asynccontextmanager

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

NIXL_PREFILL = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def create_app(prefills: list[str], decodes: list[str]) -> FastAPI:
    clients: dict[str, httpx.AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for url in (*prefills, *decodes):
            clients[url] = httpx.AsyncClient(
                base_url=url,
                timeout=None,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
            )
        yield
        for client in clients.values():
            await client.aclose()

    app = FastAPI(lifespan=lifespan)
    next_prefill, next_decode = itertools.cycle(prefills), itertools.cycle(decodes)

    async def handle(request: Request, path: str):
        body = await request.json()
        headers = {"X-Request-Id": str(uuid.uuid4())}
        leg = dict(body, stream=False, max_tokens=1, kv_transfer_params=NIXL_PREFILL)
        if "max_completion_tokens" in leg:
            leg["max_completion_tokens"] = 1
        for key in ("stream_options", "min_tokens", "min_completion_tokens"):
            leg.pop(key, None)
        answer = await clients[next(next_prefill)].post(path, json=leg, headers=headers)
        if answer.status_code != 200:
            return JSONResponse(answer.json(), status_code=answer.status_code)
        decode_body = dict(body)
        if params := answer.json().get("kv_transfer_params"):
            decode_body["kv_transfer_params"] = params
        client = clients[next(next_decode)]

        if not body.get("stream"):
            out = await client.post(path, json=decode_body, headers=headers)
            return JSONResponse(out.json(), status_code=out.status_code)

        async def relay():
            async with client.stream("POST", path, json=decode_body, headers=headers) as r:
                async for chunk in r.aiter_bytes():
                    yield chunk

        return StreamingResponse(relay(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await handle(request, "/v1/completions")

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await handle(request, "/v1/chat/completions")

    @app.get("/v1/models")
    async def models():
        return (await clients[decodes[0]].get("/v1/models")).json()

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    return app


def main() -> None:
    port, prefill, decode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    uvicorn.run(
        create_app([prefill], [decode]),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
