"""An upstream's answer to one leg, over the proxy's client (connector/http/upstream.py).

`stream(flight, out)` passes the rest of an event stream to the client once its head is out:
each piece is scanned (token times, usage, garbage) and sent from the socket's callback; it
returns at the end of the body, or early when the scan found garbage (`flight.malformed`),
which is never sent.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from connector.dispatch.flight import Flight, clock
from connector.http.client_stream import ChunkedOut
from connector.http.upstream import UpstreamConnection, UpstreamPool


class Answer:
    __slots__ = ("conn",)

    def __init__(self, conn: UpstreamConnection) -> None:
        self.conn = conn

    @property
    def status(self) -> int:
        return self.conn.status

    def header(self, name: str, default: str = "") -> str:
        return self.conn.header(name, default)

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


class Post:
    """One leg's POST; `total` bounds the whole leg (TimeoutError). A class, not a generator
    context manager, and no timeout scope for an unbounded (streaming) leg: both run once per
    leg."""

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
        return Answer(self._conn)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._conn is not None:
            self._pool.release(self._conn)  # kept when it ended cleanly
        if self._timeout is not None:
            await self._timeout.__aexit__(kind, exc, tb)
