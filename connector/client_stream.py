"""The client's side of a streamed answer, once aiohttp has sent the response head: each chunk
of SSE bytes goes straight to the client's transport in HTTP/1.1 chunked framing, exactly as
aiohttp's StreamWriter frames it, without its per-write bookkeeping (three Python calls, a
writelines and a byte count per token). Anything else (HTTP/1.0, compression, a declared
length, a head still buffered) keeps aiohttp's own write: `ChunkedOut.of` returns None.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.http_writer import StreamWriter

DRAIN_ABOVE = 0x10000  # bytes queued in the transport before waiting for the client to read


class ClientGone(Exception):
    """Writing to the client failed: it hung up (not an upstream failure)."""


class ChunkedOut:
    __slots__ = ("transport", "writer")

    def __init__(self, transport: asyncio.Transport, writer: StreamWriter) -> None:
        self.transport, self.writer = transport, writer

    @classmethod
    def of(cls, transport: Any, writer: Any) -> ChunkedOut | None:
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

    def send(self, chunk: bytes) -> bool:
        """Queue one chunk; True when the client is behind and `drain` should be awaited."""
        transport = self.transport
        if transport.is_closing():
            raise ClientGone
        transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        return transport.get_write_buffer_size() > DRAIN_ABOVE

    async def drain(self) -> None:
        try:
            await self.writer.drain()
        except ConnectionError:
            raise ClientGone from None
