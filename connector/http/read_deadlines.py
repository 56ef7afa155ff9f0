"""A deadline on reading a request's head, which aiohttp's server does not have: a client
that sends its headers a line at a time (slowloris) would otherwise hold a connection, and
its memory, for as long as it likes. The body has its own deadline where the proxy reads it.

Each connection is aiohttp's request handler (its parser reads every byte) inside a
`ClientConnection` that only watches: from a byte that arrives while no request is being
answered, a request must reach a handler within the deadline (`busy`, told by the
`mark_busy` middleware), or the connection closes. It also keeps the connection's flow
control for the streamed answers' fast path (connector/client_stream.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

from aiohttp import web


class ClientConnection(asyncio.Protocol):
    __slots__ = ("_drain", "_lost", "busy", "handler", "loop", "seconds", "timer", "transport")

    def __init__(
        self, handler: asyncio.Protocol, seconds: float, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.handler, self.seconds, self.loop = handler, seconds, loop
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.busy = False  # a request is being answered: bytes now are its body or the next
        self._drain: asyncio.Future[None] | None = None  # set while the client's socket is full
        self._lost = False

    # -- the event loop's side, passed on to aiohttp's handler -------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP connection's
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)
        transport = self.transport
        if self.busy or self.timer is not None or transport is None or transport.is_closing():
            return
        self.timer = self.loop.call_later(self.seconds, self._head_too_slow)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._stop_timer()
        self._wake_writer(ConnectionResetError("the client closed the connection"))
        self.handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self.handler.pause_writing()
        if self._drain is None:
            self._drain = self.loop.create_future()

    def resume_writing(self) -> None:
        self.handler.resume_writing()
        self._wake_writer(None)

    # -- the head deadline -------------------------------------------------------------------
    def request_started(self) -> None:
        self.busy = True
        self._stop_timer()

    def request_ended(self) -> None:
        self.busy = False

    def _head_too_slow(self) -> None:
        self.timer = None
        if self.transport is not None and not self.busy:
            self.transport.close()  # no answer: the client has not finished asking

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    # -- flow control ------------------------------------------------------------------------
    async def drain(self) -> None:
        """Wait while the client's socket is full; ConnectionResetError once it is gone."""
        if self._lost:
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
                waiter.exception()  # retrieved: nobody may be waiting for it


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def mark_busy(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Tell the connection a request reached its handler: its head deadline is met."""
    transport = request.transport
    conn = transport.get_protocol() if transport is not None else None
    if not isinstance(conn, ClientConnection):
        return await handler(request)
    conn.request_started()
    try:
        return await handler(request)
    finally:
        conn.request_ended()


class HeadDeadlineSite(web.BaseSite):
    """A TCP site whose connections are aiohttp's handlers inside `ClientConnection`."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, head_seconds: float) -> None:
        super().__init__(runner)
        self.server = runner.server
        self.host, self.requested_port, self.head_seconds = host, port, head_seconds
        self.listener: asyncio.Server | None = None

    @property
    def name(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def port(self) -> int:
        if self.listener is None or not self.listener.sockets:
            return self.requested_port
        return int(self.listener.sockets[0].getsockname()[1])

    async def start(self) -> None:
        await super().start()  # registers the site with its runner
        loop = asyncio.get_running_loop()
        server, seconds = self.server, self.head_seconds
        if server is None:
            raise RuntimeError("the runner is not set up")
        self.listener = await loop.create_server(
            lambda: ClientConnection(server(), seconds, loop), self.host, self.requested_port
        )

    async def stop(self) -> None:
        if self.listener is not None:  # no new connections; the runner ends the open ones
            self.listener.close()
        await super().stop()
