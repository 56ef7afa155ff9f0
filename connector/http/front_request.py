"""A request the proxy's own front (connector/http/front.py) reads, as `Proxy.generate` reads it:
its path, headers and body, and the event stream the relay writes its answer to.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from connector.http.client_stream import DRAIN_ABOVE, ChunkedOut
from connector.http.front_head import RequestHead

if TYPE_CHECKING:
    from connector.http.front import FrontConnection

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)


class FrontRequest:
    """What `Proxy.generate` reads of a request the front took: its path, headers and body;
    `open_sse` starts its event stream."""

    __slots__ = (
        "_parts",
        "_waiter",
        "close",
        "conn",
        "headers",
        "length",
        "need",
        "path",
        "stream",
    )

    def __init__(self, conn: FrontConnection, head: RequestHead) -> None:
        self.conn = conn
        self.path, self.headers, self.close = head.path, head.headers, head.close
        self.need = self.length = head.length  # body bytes still to come
        self.stream: FrontStream | None = None
        self._parts: list[bytes] = []
        self._waiter: asyncio.Future | None = None

    @property
    def transport(self) -> asyncio.Transport | None:
        return self.conn.transport

    def feed(self, data: bytes) -> bytes:
        """Take this request's body bytes from `data`; returns what follows the body."""
        need = self.need
        if not need or not data:
            return data
        keep = self.length <= self.conn.server.max_body
        if len(data) <= need:
            if keep:
                self._parts.append(data)
            self.need = need - len(data)
            rest = b""
        else:
            if keep:
                self._parts.append(data[:need])
            self.need = 0
            rest = data[need:]
        if not self.need and self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        return rest

    def lost(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(ConnectionResetError("the client closed the connection"))

    def body_complete(self) -> bool:
        return not self.need

    async def body(self) -> bytes:
        """The whole body (the caller bounds the wait: the proxy's body deadline)."""
        if self.need:
            self._waiter = self.conn.server.loop.create_future()
            await self._waiter
        parts = self._parts
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def open_sse(self) -> FrontStream:
        self.stream = FrontStream(self.conn)
        return self.stream


class FrontStream:
    """An event stream to the client, in HTTP/1.1 chunked framing: what the relay writes to,
    as it writes to aiohttp's StreamResponse. The head goes out with the first chunk."""

    __slots__ = ("conn", "ended", "head")
    prepared = True

    def __init__(self, conn: FrontConnection) -> None:
        self.conn, self.head, self.ended = conn, SSE_HEAD, False

    def _send(self, data: bytes) -> asyncio.Transport:
        transport = self.conn.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("Cannot write to closing transport")
        if self.head:
            data, self.head = self.head + data, b""
        transport.write(data)
        return transport

    async def write(self, chunk: bytes) -> None:
        if not chunk:
            return
        transport = self._send(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        if transport.get_write_buffer_size() > DRAIN_ABOVE:
            await self.conn.drain()

    async def write_eof(self, tail: bytes = b"") -> None:
        if self.ended:
            return
        self._send((b"%x\r\n%b\r\n" % (len(tail), tail) if tail else b"") + b"0\r\n\r\n")
        self.ended = True

    def out(self) -> ChunkedOut | None:
        """The fast path for the rest of the stream, once the head is on the wire."""
        transport = self.conn.transport
        if self.head or transport is None:
            return None
        return ChunkedOut(transport, self.conn)

    async def drain(self) -> None:
        await self.conn.drain()
