"""Read deadlines for the control plane's HTTP connections: uvicorn has none for a request's
head (a client sending one header line every few seconds holds a connection for ever), so
this is its h11 protocol with two timers, set by `pdctl serve` (web/cli.py):

- head: from the connection's start, or the end of its previous response, until the request
  line and headers are complete (bytes trickling in do not restart it);
- body: from the end of the head until the body is complete.

Either missed closes the connection. Waiting on the app, and websockets once upgraded, are
not timed here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("uvicorn.error")


class DeadlineH11Protocol(H11Protocol):
    header_timeout_s = 10.0
    body_timeout_s = 30.0

    _deadline: asyncio.TimerHandle | None = None
    _phase: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(cast(asyncio.Transport, transport))  # a TCP connection's
        self._follow_phase()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if not self.transport.is_closing():
            self._follow_phase()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._cancel()
        self._phase = "upgraded"
        super().handle_websocket_upgrade(event)

    def _follow_phase(self) -> None:
        """The timer for what the client owes now: a head (IDLE), a body, or nothing."""
        if self._phase == "upgraded":
            return
        state = self.conn.their_state
        phase = "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if phase == self._phase:
            return
        self._cancel()
        self._phase = phase
        if phase is not None:
            timeout = self.header_timeout_s if phase == "head" else self.body_timeout_s
            self._deadline = self.loop.call_later(timeout, self._expired, phase, timeout)

    def _expired(self, phase: str, timeout: float) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        client = "{}:{}".format(*self.client) if self.client else "a client"
        what = "request head" if phase == "head" else "request body"
        logger.info("closed the connection of %s: its %s took over %g s", client, what, timeout)
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
        self.transport.close()

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


def protocol(header_timeout_s: float, body_timeout_s: float) -> type[DeadlineH11Protocol]:
    """The protocol class uvicorn is given (`http=`), with these deadlines."""
    return type(
        "DeadlineH11Protocol",
        (DeadlineH11Protocol,),
        {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
    )
