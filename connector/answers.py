"""An upstream's answer to one leg, read the same way whichever client carried it: the proxy's
own (connector/upstream.py: pieces handed from the socket's callback to the client) or
aiohttp's (TLS upstreams and whatever else the own client does not speak).

`stream(flight, out)` passes the rest of an event stream to the client once its head is out:
each piece is scanned (token times, usage, garbage) and sent; it returns at the end of the
body, or early when the scan found garbage (`flight.malformed`), which is never sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp

from connector.client_stream import ChunkedOut
from connector.flight import Flight, clock
from connector.upstream import UpstreamConnection, UpstreamPool


class DirectAnswer:
    __slots__ = ("conn",)

    def __init__(self, conn: UpstreamConnection) -> None:
        self.conn = conn

    @property
    def status(self) -> int:
        return self.conn.head.status  # type: ignore[union-attr]

    def header(self, name: str, default: str = "") -> str:
        return self.conn.head.get(name, default)  # type: ignore[union-attr]

    async def read(self) -> bytes:
        return await self.conn.read_all()

    async def read_some(self) -> bytes:
        return await self.conn.read_some()

    async def stream(self, flight: Flight, out: ChunkedOut) -> None:
        scan, send, conn = flight.scan, out.send, self.conn

        def sink(chunk: bytes) -> bool:
            flight.last_read = now = clock()
            scan(chunk, now)
            if flight.malformed is not None:
                return True
            return send(chunk)

        while not await conn.stream_to(sink):
            if flight.malformed is not None:
                return
            await out.drain()  # the client is behind: the upstream waits, paused, meanwhile
            conn.resume()


class AiohttpAnswer:
    __slots__ = ("resp",)

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    @property
    def status(self) -> int:
        return self.resp.status

    def header(self, name: str, default: str = "") -> str:
        return self.resp.headers.get(name, default)

    async def read(self) -> bytes:
        return await self.resp.read()

    async def read_some(self) -> bytes:
        return await self.resp.content.readany()

    async def stream(self, flight: Flight, out: ChunkedOut) -> None:
        scan, send, read = flight.scan, out.send, self.resp.content.readany
        while chunk := await read():
            flight.last_read = now = clock()
            scan(chunk, now)
            if flight.malformed is not None:
                return
            if send(chunk):
                await out.drain()


Answer = DirectAnswer | AiohttpAnswer


@contextlib.asynccontextmanager
async def direct_post(
    pool: UpstreamPool,
    base_url: str,
    path: str,
    data: str,
    headers: dict[str, str],
    total: float | None,
) -> AsyncIterator[Answer]:
    """POST over the proxy's own client; `total` bounds the whole leg (TimeoutError)."""
    async with asyncio.timeout(total):
        conn = await pool.post(base_url, path, data.encode(), headers)
        try:
            yield DirectAnswer(conn)
        finally:
            pool.release(conn)  # kept for the next leg only when its answer ended cleanly


@contextlib.asynccontextmanager
async def aiohttp_post(
    session: aiohttp.ClientSession,
    url: str,
    data: str,
    headers: dict[str, str],
    timeout: aiohttp.ClientTimeout,
) -> AsyncIterator[Answer]:
    async with session.post(url, data=data, headers=headers, timeout=timeout) as resp:
        yield AiohttpAnswer(resp)
