"""The proxy's own server for the two completion routes: the hot path without aiohttp's
server (its request object, handler task machinery, response preparation and writer), which
cost about a tenth of the proxy's CPU per request under `make bench-proxy`.

Each accepted connection starts here. A request the front reads itself (connector/
front_head.py: `POST /v1/completions` or `/v1/chat/completions`, HTTP/1.1, a plain head with a
Content-Length) is handed to `Proxy.generate` as a `FrontRequest`; its answer goes straight to
the transport (a whole JSON answer with its length, or an event stream in chunked framing, the
head sent with the first chunk). Anything else, at the first byte that shows it, is given to
an aiohttp request handler with every byte read so far, and the connection is aiohttp's from
then on: admin, metrics, health, odd heads and their errors are exactly aiohttp's.

Kept from aiohttp: the head deadline (connector/http/read_deadlines.py), the body deadline and size
limit (Proxy._read_body), keep-alive with its idle timeout, pipelined requests answered in
order, a hung-up client cancelling its request, a graceful shutdown.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import cast

from aiohttp import web

from connector.http.client_stream import ClientAnswer
from connector.http.front_head import MAX_HEAD, line_is_hot, may_be_hot, parse_hot_head
from connector.http.front_request import FrontRequest

log = logging.getLogger("connector.proxy")
KEEPALIVE_S = 75.0  # aiohttp's keepalive_timeout: an idle connection closes after this
SWEEP_S = 5.0
PIPELINE_LIMIT = 1 << 16  # bytes of later requests kept while one is answered
_INTERNAL = (
    b'{"error": {"message": "internal proxy error", "type": "InternalServerError", "code": 500}}'
)

Generate = Callable[[FrontRequest], Awaitable[ClientAnswer]]


class FrontServer:
    """What the connections share: where requests go, the deadlines, the open connections."""

    def __init__(
        self,
        generate: Generate,
        delegate: Callable[[], asyncio.Protocol],
        head_timeout: float,
        max_body: int,
    ) -> None:
        self.generate, self.delegate, self.head_timeout = generate, delegate, head_timeout
        self.max_body = max_body  # a longer body is refused (413) and not kept
        self.connections: set[FrontConnection] = set()
        self.loop = asyncio.get_running_loop()
        self._sweeper = self.loop.create_task(self._sweep())
        self.closing = False

    def __call__(self) -> FrontConnection:
        return FrontConnection(self)

    def adopt(self, transport: asyncio.Transport, data: bytes) -> None:
        """A connection aiohttp had, given back at a completion request's first bytes."""
        conn = FrontConnection(self)
        transport.set_protocol(conn)
        conn.connection_made(transport)
        conn.data_received(data)

    async def _sweep(self) -> None:
        """Close connections idle past KEEPALIVE_S (one timer for all, not one per request)."""
        while True:
            await asyncio.sleep(SWEEP_S)
            now = self.loop.time()
            for conn in list(self.connections):
                if conn.idle_since is not None and now - conn.idle_since > KEEPALIVE_S:
                    conn.close()

    async def shutdown(self, timeout: float) -> None:
        """Idle connections close now; requests being answered get `timeout` to finish."""
        self.closing = True
        self._sweeper.cancel()
        for conn in list(self.connections):
            if conn.task is None:
                conn.close()
        tasks = [c.task for c in self.connections if c.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        for conn in list(self.connections):
            if conn.task is not None:
                conn.task.cancel()
            conn.close()


class FrontConnection(asyncio.Protocol):
    __slots__ = (
        "_drain",
        "_paused_reading",
        "buf",
        "head_timer",
        "idle_since",
        "request",
        "server",
        "task",
        "transport",
    )

    def __init__(self, server: FrontServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = b""  # a head not yet whole, or the next requests while one is answered
        self.request: FrontRequest | None = None
        self.task: asyncio.Task | None = None
        self.head_timer: asyncio.TimerHandle | None = None
        self.idle_since: float | None = None
        self._drain: asyncio.Future | None = None  # set while the client's socket is full
        self._paused_reading = False

    # -- the event loop's side ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP connection's
        self.idle_since = self.server.loop.time()
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        req = self.request
        if req is not None:
            if req.need:
                data = req.feed(data)
                if not data:
                    return
            self.buf += data  # a later request: read when this one is answered
            if len(self.buf) > PIPELINE_LIMIT and not self._paused_reading:
                self._paused_reading = True
                self.transport.pause_reading()  # type: ignore[union-attr]  # data came: connected
            return
        self._read_head(self.buf + data if self.buf else data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self._stop_head_timer()
        if self.task is not None:  # the client hung up: its request ends here
            self.task.cancel()
        if self.request is not None:
            self.request.lost()
        self._wake_writer(ConnectionResetError("the client closed the connection"))

    def pause_writing(self) -> None:
        if self._drain is None:
            self._drain = self.server.loop.create_future()

    def resume_writing(self) -> None:
        self._wake_writer(None)

    # -- reading a head ----------------------------------------------------------------------
    def _read_head(self, data: bytes) -> None:
        self.buf = b""
        end = data.find(b"\r\n\r\n")
        if end < 0:
            line_end = data.find(b"\r\n")
            line = data if line_end < 0 else data[:line_end]
            still = may_be_hot(line) if line_end < 0 else line_is_hot(line)
            if not still or len(data) > MAX_HEAD:
                self._delegate(data)
                return
            self.buf = data
            self.idle_since = None
            if self.head_timer is None:
                self.head_timer = self.server.loop.call_later(
                    self.server.head_timeout, self._head_too_slow
                )
            return
        head = parse_hot_head(data[:end])
        if head is None:
            self._delegate(data)
            return
        self._stop_head_timer()
        self.idle_since = None
        req = self.request = FrontRequest(self, head)
        rest = req.feed(data[end + 4 :])
        self.buf = rest
        self.task = self.server.loop.create_task(self._answer(req))

    def _head_too_slow(self) -> None:
        self.head_timer = None
        self.close()  # no answer: the client has not finished asking

    def _stop_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _delegate(self, data: bytes) -> None:
        """From now on this connection is aiohttp's, starting with the bytes read so far."""
        self._stop_head_timer()
        self.server.connections.discard(self)
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        handler = self.server.delegate()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if self._paused_reading:
            self._paused_reading = False
            transport.resume_reading()
        if data:
            handler.data_received(data)

    # -- answering ---------------------------------------------------------------------------
    async def _answer(self, req: FrontRequest) -> None:
        try:
            resp = await self.server.generate(req)
        except asyncio.CancelledError:
            self.close()
            return
        except Exception:
            log.exception("the proxy failed on %s", req.path)
            if req.stream is None:
                self._write_whole(500, "Internal Server Error", {}, _INTERNAL, close=True)
            self.close()
            return
        finally:
            self.task = None
        stream = req.stream
        keep = not (req.close or req.need > 0 or self.server.closing)
        if stream is None and isinstance(resp, web.Response):
            body = resp.body if isinstance(resp.body, bytes) else b""
            self._write_whole(resp.status, resp.reason, resp.headers, body, not keep)
        elif stream is None or not stream.ended:
            keep = False  # nothing answered (the client is gone), or a stream cut off
        if keep:
            self._next()
        else:
            self.close()

    def _write_whole(
        self, status: int, reason: str | None, headers: Mapping[str, str], body: bytes, close: bool
    ) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        reason = reason or _reason(status)
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, reason.encode("latin-1"))]
        for name, value in headers.items():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        lines.append(b"Content-Length: %d\r\n" % len(body))
        if close:
            lines.append(b"Connection: close\r\n")
        lines.append(b"\r\n")
        lines.append(body)
        transport.write(b"".join(lines))

    def _next(self) -> None:
        """The answer is out: read the next request, if one came meanwhile."""
        self.request = None
        self.idle_since = self.server.loop.time()
        if self._paused_reading and self.transport is not None:
            self._paused_reading = False
            self.transport.resume_reading()
        if self.buf:
            self._read_head(self.buf)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # -- flow control ------------------------------------------------------------------------
    async def drain(self) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        if self._drain is not None:
            await self._drain

    def _wake_writer(self, exc: Exception | None) -> None:
        waiter, self._drain = self._drain, None
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
