"""An upstream's answer to one leg, read the same way whichever client carried it: the proxy's
own (connector/http/upstream.py: pieces handed from the socket's callback to the client) or
aiohttp's (TLS upstreams and whatever else the own client does not speak).

`stream(flight, out)` passes the rest of an event stream to the client once its head is out:
each piece is scanned (token times, usage, garbage) and sent; it returns at the end of the
body, or early when the scan found garbage (`flight.malformed`), which is never sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from connector.dispatch.flight import Flight, clock
from connector.http.client_stream import ChunkedOut
from connector.http.upstream import UpstreamConnection, UpstreamPool


class DirectAnswer:
    __slots__ = ("conn",)

    def __init__(self, conn: UpstreamConnection) -> None:
        self.conn = conn

    @property
    def status(self) -> int:
        return self.conn.head.status  # type: ignore[union-attr]  # answered after read_head

    def header(self, name: str, default: str = "") -> str:
        return self.conn.head.get(name, default)  # type: ignore[union-attr]  # as status

    async def read(self) -> bytes:
        return await self.conn.read_all()

    async def read_some(self) -> bytes:
        return await self.conn.read_some()

    async def stream(self, flight: Flight, out: ChunkedOut) -> None:
        scan, send, conn = flight.scan, out.send, self.conn

        def sink(chunk: bytes, framed: bytes | None) -> bool:
            flight.last_read = now = clock()
            scan(chunk, now)
            if flight.malformed is not None:
                return True
            return send(chunk, framed)

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


class DirectPost:
    """POST over the proxy's own client; `total` bounds the whole leg (TimeoutError). A class,
    not a generator context manager, and no timeout scope for an unbounded (streaming) leg:
    both run once per leg."""

    __slots__ = ("_args", "_conn", "_pool", "_timeout")

    def __init__(
        self,
        pool: UpstreamPool,
        base_url: str,
        path: str,
        data: bytes,
        headers: dict[str, str],
        total: float | None,
    ) -> None:
        self._pool, self._args = pool, (base_url, path, data, headers)
        self._timeout = None if total is None else asyncio.timeout(total)
        self._conn: UpstreamConnection | None = None

    async def __aenter__(self) -> Answer:
        timeout = self._timeout
        if timeout is not None:
            await timeout.__aenter__()
        try:
            self._conn = await self._pool.post(*self._args)
        except BaseException as exc:
            if timeout is not None:  # a cancel it caused comes out as TimeoutError
                await timeout.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return DirectAnswer(self._conn)

    async def __aexit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self._pool.release(self._conn)  # type: ignore[arg-type]  # __aenter__ set it
        if self._timeout is not None:
            await self._timeout.__aexit__(kind, exc, tb)


@contextlib.asynccontextmanager
async def aiohttp_post(
    session: aiohttp.ClientSession,
    url: str,
    data: bytes,
    headers: dict[str, str],
    timeout: aiohttp.ClientTimeout,
) -> AsyncIterator[Answer]:
    async with session.post(url, data=data, headers=headers, timeout=timeout) as resp:
        yield AiohttpAnswer(resp)
