"""A deadline on reading a request's head, which aiohttp does not have: a client that sends
its headers a line at a time (slowloris) would otherwise hold a connection, and its memory,
for as long as it likes. The body has its own deadline where the proxy reads it.

`HeadDeadlineSite` is a TCPSite whose connections run `deadline_handler(seconds)`: from the
first byte of a request, its head must be complete within `seconds`, or the connection closes.
Given the proxy's `generate`, each connection starts in the proxy's own front
(connector/http/front.py), which keeps the same deadline and hands aiohttp what it does not read.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from connector.http.front import FrontServer, Generate
from connector.http.front_head import line_is_hot


def deadline_handler(seconds: float) -> type[RequestHandler]:
    class HeadDeadlineHandler(RequestHandler):
        _head_timer: asyncio.TimerHandle | None = None

        _front: FrontServer | None = None  # where a completion request goes back to

        def data_received(self, data: bytes) -> None:
            front, transport = self._front, self.transport
            if front is not None and self._idle() and transport is not None:
                line_end = data.find(b"\r\n")
                if line_end > 0 and line_is_hot(data[:line_end]):
                    self._hand_back(front, transport, data)
                    return
            heads_before = self._request_count
            super().data_received(data)
            if self._request_count > heads_before:  # a whole head arrived
                self._stop_head_timer()
            elif data and self._head_timer is None and self._between_requests():
                self._head_timer = self._loop.call_later(seconds, self._head_too_slow)

        def _between_requests(self) -> bool:
            # Not while a request is handled or queued: then these bytes are its body.
            return self._current_request is None and not self._messages

        def _idle(self) -> bool:
            """Waiting for the next request, with no byte of it read (a parser at a message
            boundary): the connection can change hands."""
            waiter = self._waiter
            return (
                waiter is not None
                and not waiter.done()
                and not self._messages
                and self._head_timer is None
                and self._payload_parser is None
                and not self._upgraded
            )

        def _hand_back(self, front: FrontServer, transport: asyncio.Transport, data: bytes) -> None:
            """A completion request on a connection aiohttp took over (for a GET, say): the
            front reads it, and the connection is the front's again."""
            self.transport = None  # so that closing this handler leaves the socket open
            self.connection_lost(None)  # ends its task and its keep-alive timer
            front.adopt(transport, data)

        def _head_too_slow(self) -> None:
            self._head_timer = None
            if self.transport is not None:
                self.transport.close()  # no answer: the client has not finished asking

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def connection_lost(self, exc: BaseException | None) -> None:
            self._stop_head_timer()
            super().connection_lost(exc)

    return HeadDeadlineHandler


class HeadDeadlineSite(web.TCPSite):
    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        head_seconds: float,
        generate: Generate | None = None,
        max_body: int = 1 << 20,
    ) -> None:
        super().__init__(runner, host, port)
        self._handler_class = deadline_handler(head_seconds)
        self._head_seconds, self._generate, self._max_body = head_seconds, generate, max_body
        self.front: FrontServer | None = None

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        loop = asyncio.get_running_loop()
        server: Any = self._runner.server
        handler_class = self._handler_class

        def protocol() -> RequestHandler:
            # Exactly what aiohttp's Server builds, with the deadline added.
            handler = handler_class(server, loop=loop, **server._kwargs)
            handler._front = self.front  # type: ignore[attr-defined]  # HeadDeadlineHandler's
            return handler

        factory: Any = protocol
        if self._generate is not None:
            self.front = FrontServer(self._generate, protocol, self._head_seconds, self._max_body)
            factory = self.front
        self._server = await loop.create_server(
            factory,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )

    async def stop(self) -> None:
        await super().stop()
        if self.front is not None:  # as aiohttp's shutdown: answers in progress may finish
            await self.front.shutdown(getattr(self._runner, "_shutdown_timeout", 60.0))
