"""The proxy's one HTTP/1.1 client for the legs, on kept-alive connections: a request written
in one write (connector/http/request.py), the response parsed by llhttp on one connection
(connector/http/connection.py, strict on purpose against request smuggling), and the body's
pieces handed from the socket straight to a sink (the SSE scan and the client's transport).

This package is the one seam between the parser, the sockets and the proxy: every fault
leaves it as a connector/errors.py UpstreamFault, and a connection that faulted is closed,
never reused. The pool here keeps connections alive per upstream and retries a stale one.
"""

from __future__ import annotations

import asyncio
import ssl
import time

from connector.errors import ConnectFailed, ConnectionLost, ConnectTimedOut
from connector.http.connection import (
    MAX_FIELDS,
    MAX_STALL_BYTES,
    MAX_TRAILERS,
    Sink,
    UpstreamConnection,
)
from connector.http.request import Target, post_request, target_of, where

__all__ = [
    "KEEPALIVE_SECONDS",
    "MAX_FIELDS",
    "MAX_STALL_BYTES",
    "MAX_TRAILERS",
    "Sink",
    "UpstreamConnection",
    "UpstreamPool",
]

KEEPALIVE_SECONDS = 15.0  # an idle connection older than this is closed, not reused


class UpstreamPool:
    """Kept-alive connections per upstream (host, port); LIFO, aged out after KEEPALIVE."""

    def __init__(self, connect_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self._idle: dict[tuple[str, int], list[UpstreamConnection]] = {}
        self._targets: dict[str, Target] = {}
        self._tls: ssl.SSLContext | None = None
        self.opened = 0  # connections made (tests read it to see reuse)

    def _target(self, base_url: str) -> Target:
        target = self._targets.get(base_url)
        if target is None:
            target = self._targets[base_url] = target_of(base_url)
        return target

    async def post(
        self, base_url: str, path: str, body: bytes, headers: dict[str, str]
    ) -> UpstreamConnection:
        """Send a POST and return its connection once the response head is in. A kept-alive
        connection that closes before answering a byte is retried once on a new one."""
        key, host_header, prefix, tls, auth = self._target(base_url)
        if auth is not None and "authorization" not in {k.lower() for k in headers}:
            headers = {**headers, "Authorization": auth}
        raw = post_request(prefix + path, host_header, body, headers)
        conn = self._reuse(key)
        if conn is not None:
            conn.send(raw)
            try:
                await conn.read_head()
                return conn
            except ConnectionLost:  # closed or reset: stale if it said nothing
                conn.close()
                if conn.answered:
                    raise
            except BaseException:
                conn.close()
                raise
        conn = await self._connect(key, tls)
        conn.send(raw)
        try:
            await conn.read_head()
        except BaseException:
            conn.close()
            raise
        return conn

    def release(self, conn: UpstreamConnection) -> None:
        """Keep `conn` for the next request when its answer ended cleanly; close it otherwise."""
        if not conn.reusable:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.key, []).append(conn)

    def _reuse(self, key: tuple[str, int]) -> UpstreamConnection | None:
        idle = self._idle.get(key)
        oldest = time.monotonic() - KEEPALIVE_SECONDS
        while idle:
            if idle[0].idle_since < oldest:
                idle.pop(0).close()
                continue
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    async def _connect(self, key: tuple[str, int], tls: bool) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        context = None
        if tls:
            if self._tls is None:
                self._tls = ssl.create_default_context()
            context = self._tls
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: UpstreamConnection(key), key[0], key[1], ssl=context
                )
        except TimeoutError:  # an OSError too, but a slow host, not a refusal
            raise ConnectTimedOut(
                f"no connection to {where(key)} within {self.connect_timeout:g} s"
            ) from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {where(key)}: {exc.strerror or exc}") from None
        self.opened += 1
        return conn

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
