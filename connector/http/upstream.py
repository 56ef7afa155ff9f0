"""The proxy's own HTTP/1.1 client for the legs, on kept-alive connections: a request written
in one write, the response head parsed once, and the body's pieces handed from the socket's
`data_received` straight to a sink (the SSE scan and the client's transport) with no reader,
future or task wakeup per token. The legs' plain-http upstreams use it; TLS or anything else
it does not speak keeps aiohttp (`UpstreamPool.speaks`).

Faults surface as the aiohttp exceptions the legs already map to error events:
ClientConnectorError (cannot connect), ServerDisconnectedError (closed before the head),
ClientPayloadError (a body cut short or mis-framed), ClientResponseError (a head that is not
HTTP/1.x); a connect past --connect-timeout is a TimeoutError, as aiohttp's is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

import aiohttp
from aiohttp.client_reqrep import ConnectionKey
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from connector.http.http1_parse import MAX_HEAD_BYTES, Body, FramingError, ResponseHead, parse_head

KEEPALIVE_SECONDS = 15.0  # aiohttp's keepalive_timeout: an idle connection older is closed
USER_AGENT = f"Python/3 aiohttp/{aiohttp.__version__}"
# (payload, the same bytes chunk-framed when they came so, or None) -> True: the task must act
# (client behind, or stop)
Sink = Callable[[bytes, bytes | None], bool]


class UpstreamConnection(asyncio.Protocol):
    """One kept-alive connection to an upstream, carrying one request at a time."""

    def __init__(self, key: tuple[str, int]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.head: ResponseHead | None = None
        self.answered = False  # a byte of the response came
        self.idle_since = 0.0
        self._buf = b""
        self._body: Body | None = None
        self._pieces: list[bytes] = []
        self._sink: Sink | None = None
        self._signal = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future | None = None
        self._closed = False

    # -- the event loop's side ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP connection's

    def data_received(self, data: bytes) -> None:
        self.answered = True
        body = self._body
        if body is None:
            data = self._read_head(data)
            body = self._body
            if body is None or not data:
                return
        elif body.done:  # bytes after the answer (or while idle): the connection is unusable
            self.close()
            return
        try:
            piece = body.feed(data)
        except FramingError as exc:
            self._fail(aiohttp.ClientPayloadError(str(exc)))
            return
        if piece:
            if self._sink is None:
                self._pieces.append(piece)
            else:
                try:
                    if self._sink(piece, body.framed):
                        self._signal = True
                        self.transport.pause_reading()  # type: ignore[union-attr]  # data came: connected
                except Exception as exc:  # the sink's own (ClientGone): the task gets it
                    self._fail(exc)
                    return
        if body.done or (piece and self._sink is None) or self._signal:
            self._wake()

    def _read_head(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            self._buf = buf
            if len(buf) > MAX_HEAD_BYTES:
                self._fail(_bad_head(self.key, "Header section too long"))
            return b""
        self._buf = b""
        try:
            self.head = parse_head(buf[:end])
            self._body = Body(self.head)
        except FramingError as exc:
            self._fail(_bad_head(self.key, str(exc)))
            return b""
        self._wake()
        return buf[end + 4 :]

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if isinstance(exc, OSError) and self._body is None and self._error is None:
            self._fail(aiohttp.ClientOSError(*exc.args))  # as aiohttp reports a reset
        self._ended()

    def _ended(self) -> None:
        if self._error is not None:
            return
        body = self._body
        if body is None:
            self._fail(aiohttp.ServerDisconnectedError())
            return
        try:
            piece = body.feed_eof()
        except FramingError as exc:
            self._fail(aiohttp.ClientPayloadError(str(exc)))
            return
        if piece:
            self._pieces.append(piece)
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self._sink = None
        self._wake()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

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
        self.head, self._body, self.answered = None, None, False
        self._pieces.clear()
        self.transport.write(raw)  # type: ignore[union-attr]  # the pool sends on connected ones

    async def read_head(self) -> ResponseHead:
        while self.head is None and self._error is None:
            await self._wait()
        if self._error is not None:
            raise self._error
        return self.head  # type: ignore[return-value]  # the loop ends on a head or an error

    @property
    def at_eof(self) -> bool:
        return self._body is not None and self._body.done and not self._pieces

    async def read_some(self) -> bytes:
        """The payload that came since the last read; b"" once the body has ended."""
        while not self._pieces and self._error is None and not self._body.done:  # type: ignore[union-attr]  # after read_head: its body
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
            if sink(pending, None):
                self.transport.pause_reading()  # type: ignore[union-attr]  # connected
                return False
        self._sink, self._signal = sink, False
        try:
            while self._error is None and not self._signal and not self._body.done:  # type: ignore[union-attr]  # after read_head
                await self._wait()
        finally:
            self._sink = None
        if self._error is not None:
            raise self._error
        if self._pieces and not self._signal:  # the tail an until-close body's end released
            pending, self._pieces = b"".join(self._pieces), []
            sink(pending, None)
        return not self._signal

    def resume(self) -> None:
        self._signal = False
        if not self._closed:
            self.transport.resume_reading()  # type: ignore[union-attr]  # paused: connected

    @property
    def reusable(self) -> bool:
        body, head = self._body, self.head
        return (
            not self._closed
            and self._error is None
            and head is not None
            and head.keep_alive
            and body is not None
            and body.done
            and not body.extra
            and not self._pieces
        )

    def close(self) -> None:
        self._closed = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def _bad_head(key: tuple[str, int], message: str) -> aiohttp.ClientResponseError:
    info = aiohttp.RequestInfo(_url(key), "POST", CIMultiDictProxy(CIMultiDict()), _url(key))
    return aiohttp.ClientResponseError(info, (), status=400, message=message)


def _url(key: tuple[str, int]) -> URL:
    return URL.build(scheme="http", host=key[0], port=key[1])


class UpstreamPool:
    """Kept-alive connections per upstream (host, port); LIFO, aged out after KEEPALIVE."""

    def __init__(self, connect_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self._idle: dict[tuple[str, int], list[UpstreamConnection]] = {}
        self._targets: dict[str, tuple[tuple[str, int], str, str] | None] = {}
        self.opened = 0  # connections made (tests read it to see reuse)

    def speaks(self, base_url: str) -> bool:
        """Whether this client can carry a leg to `base_url` (plain http, no credentials)."""
        return self._target(base_url) is not None

    def _target(self, base_url: str) -> tuple[tuple[str, int], str, str] | None:
        if base_url not in self._targets:
            parts = urlsplit(base_url)
            ok = parts.scheme == "http" and parts.hostname and not parts.username
            port = parts.port or 80 if ok else 0
            host = parts.hostname or ""
            host_header = host if port == 80 else f"{host}:{port}"
            if ":" in host:
                host_header = f"[{host}]" if port == 80 else f"[{host}]:{port}"
            self._targets[base_url] = (
                ((host, port), host_header, parts.path.rstrip("/")) if ok else None
            )
        return self._targets[base_url]

    async def post(
        self, base_url: str, path: str, body: bytes, headers: dict[str, str]
    ) -> UpstreamConnection:
        """Send a POST and return its connection once the response head is in. A kept-alive
        connection that closes before answering a byte is retried once on a new one."""
        target = self._target(base_url)
        if target is None:
            raise ValueError(f"{base_url} is not a plain-http upstream")
        key, host_header, prefix = target
        raw = _request(prefix + path, host_header, body, headers)
        conn = self._reuse(key)
        if conn is not None:
            conn.send(raw)
            try:
                await conn.read_head()
                return conn
            except aiohttp.ClientConnectionError:  # closed or reset: stale if it said nothing
                conn.close()
                if conn.answered:
                    raise
            except BaseException:
                conn.close()
                raise
        conn = await self._connect(key)
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
            if not conn._closed and not conn.transport.is_closing():  # type: ignore[union-attr]  # pooled: connected
                return conn
        return None

    async def _connect(self, key: tuple[str, int]) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: UpstreamConnection(key), key[0], key[1]
                )
        except OSError as exc:
            ck = ConnectionKey(key[0], key[1], False, True, None, None, None, None)
            raise aiohttp.ClientConnectorError(ck, exc) from None
        self.opened += 1
        return conn

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


def _request(target: str, host: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} holds a line break")
        lines.append(f"{name}: {value}")
    lines += ["Accept: */*", f"User-Agent: {USER_AGENT}", f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body
