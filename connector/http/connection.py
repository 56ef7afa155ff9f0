"""One kept-alive HTTP/1.1 connection to an upstream, carrying one request at a time: the
response parsed by llhttp (httptools, the parser uvicorn uses), and the body's pieces handed
from the socket's `data_received` straight to a sink, with no reader, future or task wakeup
per token.

Strict on purpose (the request-smuggling classes): llhttp refuses Content-Length with
Transfer-Encoding, bad chunk sizes and extensions, bare CR, LF or NUL in a field; here a
Transfer-Encoding other than `chunked`, more than MAX_FIELDS fields or MAX_TRAILERS trailers,
and MAX_STALL_BYTES with no payload in them (a head, a size line or trailers too long) are
refused too. Every fault leaves it as a connector/errors.py UpstreamFault, and a connection
that faulted is closed, never reused.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Protocol, cast

import httptools

from connector.errors import BadResponse, ConnectionLost, UpstreamFault
from connector.http.request import where

MAX_STALL_BYTES = 65536  # bytes in a row that carry no payload: a head or trailers too long
MAX_FIELDS = 128  # header fields in a response head
MAX_TRAILERS = 32  # trailer fields after a chunked body (engines send none)
# payload -> True: the task must act (the client is behind, or the scan says stop)
Sink = Callable[[bytes], bool]


class Decompressor(Protocol):
    def decompress(self, data: bytes, /) -> bytes: ...
    def flush(self) -> bytes: ...


class _AfterAnswer(Exception):
    """Bytes came after the answer ended: the connection is not reused."""


class UpstreamConnection(asyncio.Protocol):
    """One kept-alive connection to an upstream, carrying one request at a time."""

    transport: asyncio.Transport  # set by connection_made, before the pool hands it out

    def __init__(self, key: tuple[str, int]) -> None:
        self.key = key
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}  # lower-case names, the first value kept
        self.head_done = False
        self.done = False  # the answer ended
        self.answered = False  # a byte of the answer came
        self.keep_alive = False
        self.extra = False
        self._until_close = False
        self._fields = 0
        self._stalled = 0  # bytes in a row that were not payload (heads, size lines, trailers)
        self._payload = 0  # payload bytes in the bytes being fed
        self._decoder: Decompressor | None = None
        self._pieces: list[bytes] = []
        self._sink: Sink | None = None
        self._signal = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future | None = None

    # -- the parser's callbacks --------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.done:  # a second answer to one request
            raise _AfterAnswer

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self.head_done:
            if self._fields > MAX_TRAILERS:
                raise BadResponse(f"more than {MAX_TRAILERS} trailer fields")
            return
        if self._fields > MAX_FIELDS:
            raise BadResponse(f"more than {MAX_FIELDS} header fields")
        key = name.decode("latin-1").lower()
        if key not in self.headers:
            self.headers[key] = value.decode("latin-1")
        elif key == "transfer-encoding":
            raise BadResponse("Transfer-Encoding given twice")

    def on_headers_complete(self) -> None:
        self.head_done, self._fields = True, 0
        status = self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()
        headers = self.headers
        coding = headers.get("transfer-encoding")
        if coding is not None and coding.strip().lower() != "chunked":
            raise BadResponse(f"Transfer-Encoding {coding[:40]!r} is not chunked")
        self._until_close = (
            coding is None
            and "content-length" not in headers
            and status >= 200
            and status not in (204, 304)
        )
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding and encoding != "identity":
            self._decoder = _decoder(encoding)

    def on_body(self, body: bytes) -> None:
        self._payload += len(body)
        if self._decoder is not None:
            body = self._decoder.decompress(body)
            if not body:
                return
        self._pieces.append(body)

    def on_message_complete(self) -> None:
        self.done = True
        if self._decoder is not None and (tail := self._decoder.flush()):
            self._pieces.append(tail)

    # -- the event loop's side ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP connection's

    def data_received(self, data: bytes) -> None:
        self.answered = True
        if self.done or self._error is not None:
            self._after_answer()
            return
        pieces, head_before = self._pieces, self.head_done
        self._payload = 0
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            # a callback's own exception (a limit, zlib's) is the context of the parser's
            fault = exc.__context__ or exc
            if isinstance(fault, _AfterAnswer) or self.done:
                self._after_answer()  # the answer itself ended cleanly: deliver it
            else:
                self._fail(fault if isinstance(fault, UpstreamFault) else BadResponse(str(fault)))
                return
        # What was not payload counts up until payload comes: a head, a chunk's size line
        # (with its extensions) or trailers longer than MAX_STALL_BYTES is refused.
        overhead = len(data) - self._payload
        stalled = overhead if self._payload else self._stalled + overhead
        if stalled > MAX_STALL_BYTES and not self.extra:
            self._fail(BadResponse(f"{stalled} bytes in a row that are not payload"))
            return
        self._stalled = stalled
        sink = self._sink
        if pieces and sink is not None:
            payload = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            try:
                if sink(payload):
                    self._signal = True
                    self.transport.pause_reading()
            except Exception as exc:  # the sink's own (ClientGone): the task gets it
                self._fail(exc)
                return
        if self.done or self._signal or self.head_done != head_before or pieces:
            self._wake()

    def _after_answer(self) -> None:
        self.extra = True
        self.close()
        self._wake()

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if exc is not None and not self.done and self._error is None:
            self._fail(ConnectionLost(f"connection to {where(self.key)} lost: {exc}"))
        self._ended()

    def _ended(self) -> None:
        if self._error is not None or self.done:
            self._wake()
            return
        if not self.head_done:
            self._fail(ConnectionLost(f"{where(self.key)} closed the connection unanswered"))
        elif self._until_close:  # a body without a length ends with its connection
            self.done, self.keep_alive = True, False
            if self._decoder is not None and (tail := self._decoder.flush()):
                self._pieces.append(tail)
            self._wake()
        else:
            self._fail(ConnectionLost(f"{where(self.key)} closed the connection mid-answer"))

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self._sink = None
        self._wake()
        self.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # -- the leg's side ----------------------------------------------------------------------
    def send(self, raw: bytes) -> None:
        self._reset()
        self.transport.write(raw)

    async def read_head(self) -> None:
        while not self.head_done and self._error is None:
            await self._wait()
        if self._error is not None:
            raise self._error

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)

    async def read_some(self) -> bytes:
        """The payload that came since the last read; b"" once the body has ended."""
        while not self._pieces and self._error is None and not self.done:
            await self._wait()
        if self._pieces:
            pieces, self._pieces = self._pieces, []
            return pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if self._error is not None:
            raise self._error
        return b""

    async def read_all(self) -> bytes:
        parts = []
        while chunk := await self.read_some():
            parts.append(chunk)
        return b"".join(parts)

    async def stream_to(self, sink: Sink) -> bool:
        """Hand every piece of the body to `sink` as it arrives, from the socket's callback.
        True when the body ended; False when the sink asked the task to act (the upstream is
        paused until `resume`)."""
        if self._pieces:
            pending, self._pieces = b"".join(self._pieces), []
            if sink(pending):
                self.transport.pause_reading()
                return False
        self._sink, self._signal = sink, False
        try:
            while self._error is None and not self._signal and not self.done:
                await self._wait()
        finally:
            self._sink = None
        if self._error is not None:
            raise self._error
        if self._pieces and not self._signal:  # what came with the answer's end
            pending, self._pieces = b"".join(self._pieces), []
            sink(pending)
        return not self._signal

    def resume(self) -> None:
        self._signal = False
        if not self.closed:
            self.transport.resume_reading()

    @property
    def reusable(self) -> bool:
        return (
            not self.closed
            and self._error is None
            and self.done
            and self.keep_alive
            and not self.extra
            and not self._pieces
        )

    def close(self) -> None:
        self.closed = True
        if not self.transport.is_closing():
            self.transport.close()


def _decoder(coding: str) -> Decompressor:
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return zlib.decompressobj()
    raise BadResponse(f"unsupported Content-Encoding {coding[:40]!r}")
