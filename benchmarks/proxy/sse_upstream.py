"""A fixed SSE upstream for `make bench-proxy`'s saturation rows: answers /v1/completions as a
NIXL prefill (a JSON body with kv_transfer_params) or, when the body asks to stream, with a
fixed stream of N token events, one event per chunk, paced by one shared ticker.

Cheap on purpose so that the proxy in front of it is the bottleneck: a raw asyncio protocol on
uvloop, every byte it sends built once at start, one write per stream per tick.
usage: python -m benchmarks.proxy.sse_upstream PORT[,PORT...] [TOKENS] [TICK_MS] (uvloop ticks in
ms)
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import cast

STREAM_WANTED = re.compile(rb'"stream"\s*:\s*true')
CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)
EVENT = (
    b'data: {"id":"cmpl-x","object":"text_completion","created":0,"model":"tiny",'
    b'"choices":[{"index":0,"text":" word","logprobs":null,"finish_reason":null,'
    b'"stop_reason":null}]}\n\n'
)
PREFILL_ANSWER = {
    "id": "cmpl-x",
    "object": "text_completion",
    "created": 0,
    "model": "tiny",
    "choices": [{"index": 0, "text": " word", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 128, "completion_tokens": 1, "total_tokens": 129},
    "kv_transfer_params": {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": "engine-fixed",
        "remote_block_ids": [0, 1, 2, 3, 4, 5, 6, 7],
        "remote_host": "127.0.0.1",
        "remote_port": 5600,
        "tp_size": 1,
    },
}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _whole(status: str, kind: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
TOKEN = _chunk(EVENT)
STREAM_END = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
PREFILL = _whole("200 OK", "application/json", json.dumps(PREFILL_ANSWER).encode())
HEALTH = _whole("200 OK", "application/json", b"{}")
MODELS = _whole(
    "200 OK", "application/json", b'{"object":"list","data":[{"id":"tiny","object":"model"}]}'
)
NOT_FOUND = _whole("404 Not Found", "application/json", b'{"error":"not found"}')


class Streams:
    """Every stream in progress, advanced one token per tick."""

    def __init__(self, tokens: int, tick: float) -> None:
        self.tokens, self.tick = tokens, tick
        self.active: dict[asyncio.Transport, int] = {}  # transport -> tokens still to send
        self.woken = asyncio.Event()  # a stream started: the ticker sleeps while none runs

    def start(self, transport: asyncio.Transport) -> None:
        self.active[transport] = self.tokens
        self.woken.set()

    async def run(self) -> None:
        active, token, end = self.active, TOKEN, STREAM_END
        while True:
            if not active:
                self.woken.clear()
                await self.woken.wait()
            await asyncio.sleep(self.tick)
            finished = []
            for transport, left in active.items():
                if transport.is_closing():
                    finished.append(transport)
                elif left > 1:
                    active[transport] = left - 1
                    transport.write(token)
                else:
                    transport.write(token + end)
                    finished.append(transport)
            for transport in finished:
                del active[transport]


class Upstream(asyncio.Protocol):
    def __init__(self, streams: Streams) -> None:
        self.streams = streams
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP connection's

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (head_end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:head_end]
            match = CONTENT_LENGTH.search(head)
            body_end = head_end + 4 + (int(match.group(1)) if match else 0)
            if len(self.buffer) < body_end:
                return
            body, self.buffer = self.buffer[head_end + 4 : body_end], self.buffer[body_end:]
            self.answer(head, body)

    def answer(self, head: bytes, body: bytes) -> None:
        transport = self.transport
        if transport is None:
            return
        if head.startswith(b"POST /v1/"):
            if STREAM_WANTED.search(body):
                transport.write(STREAM_HEAD)
                self.streams.start(transport)
            else:
                transport.write(PREFILL)
        elif head.startswith(b"GET /health"):
            transport.write(HEALTH)
        elif head.startswith(b"GET /v1/models"):
            transport.write(MODELS)
        else:
            transport.write(NOT_FOUND)


async def serve(ports: list[int], tokens: int, tick: float) -> None:
    """One process, one ticker, a listener per port (a prefill's and a decode's)."""
    streams = Streams(tokens, tick)
    loop = asyncio.get_running_loop()
    for port in ports:
        await loop.create_server(lambda: Upstream(streams), "127.0.0.1", port, backlog=4096)
    await streams.run()


def main() -> None:
    ports = [int(p) for p in sys.argv[1].split(",")]
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    tick = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.001
    import uvloop

    uvloop.run(serve(ports, tokens, tick))


if __name__ == "__main__":
    main()
