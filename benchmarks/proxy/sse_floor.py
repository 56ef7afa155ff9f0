"""A bare aiohttp server that streams vLLM-shaped SSE tokens with no engine behind it.

The baseline for `make bench-sim`: what one core can stream when nothing is modelled.
"""

from __future__ import annotations

import asyncio
import json
import sys

from aiohttp import web

CHUNK = (
    b'data: {"id":"cmpl-x","object":"text_completion","created":0,"model":"tiny",'
    b'"choices":[{"index":0,"text":" word","logprobs":null,"finish_reason":null,'
    b'"stop_reason":null}]}\n\n'
)


async def completions(request: web.Request) -> web.StreamResponse:
    body = json.loads(await request.read())
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(int(body.get("max_tokens", 16))):
        await response.write(CHUNK)
        await asyncio.sleep(0.002)  # one engine step per token, like the stand-in's tiny model
    await response.write(b"data: [DONE]\n\n")
    return response


async def health(request: web.Request) -> web.Response:
    return web.Response()


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
