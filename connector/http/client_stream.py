"""The client's side of a streamed answer, once aiohttp has sent the response head: each chunk
of SSE bytes goes straight to the client's transport in HTTP/1.1 chunked framing, exactly as
aiohttp's StreamWriter frames it, without its per-write bookkeeping (three Python calls, a
writelines and a byte count per token). Anything else (HTTP/1.0, compression, a declared
length, a head still buffered) keeps aiohttp's own write: `ChunkedOut.of` returns None.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol, TypeAlias

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_writer import StreamWriter

if TYPE_CHECKING:
    from connector.http.front_request import FrontRequest, FrontStream

# A client's request and the answer it gets: aiohttp's, or the proxy's own front's
# (connector/http/front.py), which hands `Proxy.generate` a FrontRequest.
ClientRequest: TypeAlias = "web.Request | FrontRequest"
ClientAnswer: TypeAlias = "web.StreamResponse | FrontStream"

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
DRAIN_ABOVE = 0x10000  # bytes queued in the transport before waiting for the client to read


class ClientGone(Exception):
    """Writing to the client failed: it hung up (not an upstream failure)."""


class Drains(Protocol):
    """What ChunkedOut waits on while the client reads: aiohttp's StreamWriter, or the front's
    connection (connector/http/front.py)."""

    async def drain(self) -> None: ...


class ChunkedOut:
    __slots__ = ("transport", "writer")

    def __init__(self, transport: asyncio.Transport, writer: Drains) -> None:
        self.transport, self.writer = transport, writer

    @classmethod
    def of(
        cls, transport: asyncio.Transport | None, writer: AbstractStreamWriter | None
    ) -> ChunkedOut | None:
        """The fast path for a prepared response whose head is on the wire, or None."""
        if (
            type(writer) is not StreamWriter
            or not writer.chunked
            or writer.length is not None
            or writer._compress is not None
            or not writer._headers_written
            or transport is None
        ):
            return None
        return cls(transport, writer)

    def send(self, chunk: bytes, framed: bytes | None = None) -> bool:
        """Queue one chunk; True when the client is behind and `drain` should be awaited.
        `framed`: the chunk already in this framing (as the upstream sent it), sent as is."""
        transport = self.transport
        if transport.is_closing():
            raise ClientGone
        transport.write(framed if framed is not None else b"%x\r\n%b\r\n" % (len(chunk), chunk))
        return transport.get_write_buffer_size() > DRAIN_ABOVE

    async def drain(self) -> None:
        try:
            await self.writer.drain()
        except ConnectionError:
            raise ClientGone from None


async def open_sse(request: ClientRequest) -> ClientAnswer:
    """Start the client's event stream: on the proxy's own front (connector/http/front.py) its
    FrontStream, else aiohttp's StreamResponse, prepared."""
    if not isinstance(request, web.BaseRequest):
        return request.open_sse()
    resp = web.StreamResponse(headers=SSE_HEADERS)
    await resp.prepare(request)
    return resp


def fast_out(request: ClientRequest, resp: ClientAnswer) -> ChunkedOut | None:
    """The fast path for the rest of a stream `open_sse` started, once its head is out."""
    if isinstance(resp, web.StreamResponse):
        return ChunkedOut.of(request.transport, resp._payload_writer)
    return resp.out()
