"""The client's side of a streamed answer. aiohttp's StreamResponse sends the head with the
first chunk; the rest goes straight to the client's transport in HTTP/1.1 chunked framing,
exactly as aiohttp's writer frames it, without its per-write bookkeeping (three Python calls,
a writelines and a byte count per token). Only a chunked, uncompressed answer on a connection
the proxy's site made takes this path (`fast_out`); anything else (HTTP/1.0, say) keeps
aiohttp's own write.
"""

from __future__ import annotations

from typing import TypeAlias

from aiohttp import web

from connector.http.read_deadlines import ClientConnection

# A client's request and the answer it gets, as the request path names them: aiohttp's.
ClientRequest: TypeAlias = web.Request
ClientAnswer: TypeAlias = web.StreamResponse

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
DRAIN_ABOVE = 0x10000  # bytes queued in the transport before waiting for the client to read


class ClientGone(Exception):
    """Writing to the client failed: it hung up (not an upstream failure)."""


class ChunkedOut:
    __slots__ = ("conn", "transport")

    def __init__(self, conn: ClientConnection) -> None:
        self.conn = conn
        self.transport = conn.transport

    def send(self, chunk: bytes) -> bool:
        """Queue one chunk; True when the client is behind and `drain` should be awaited."""
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ClientGone
        if chunk:  # an empty chunk would be the stream's end
            transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        return transport.get_write_buffer_size() > DRAIN_ABOVE

    async def drain(self) -> None:
        try:
            await self.conn.drain()
        except ConnectionError:
            raise ClientGone from None


async def open_sse(request: web.Request) -> web.StreamResponse:
    """Start the client's event stream: chunked for an HTTP/1.1 client."""
    resp = web.StreamResponse(headers=SSE_HEADERS)
    if request.version >= (1, 1):
        resp.enable_chunked_encoding()
    await resp.prepare(request)
    return resp


def fast_out(request: web.Request, resp: web.StreamResponse) -> ChunkedOut | None:
    """The fast path for the rest of a stream `open_sse` started, once a chunk has been
    written through `resp` (so its head is on the wire), or None."""
    if not resp.chunked or resp.compression or request.transport is None:
        return None
    conn = request.transport.get_protocol()
    if not isinstance(conn, ClientConnection) or conn.transport is not request.transport:
        return None
    return ChunkedOut(conn)
