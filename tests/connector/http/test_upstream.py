"""The proxy's own upstream client (connector/http/upstream.py) over real sockets: the same faults
aiohttp's client reported, kept-alive connections reused, a stale one retried once, and a slow
client pausing the upstream instead of filling the proxy's memory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest

from connector.http.http1_parse import Body, parse_head
from connector.http.upstream import UpstreamPool
from tests.connector.fakes import run, running, settings_for

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


@contextlib.asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A scripted upstream; yields its URL and a list counting the connections it took."""
    connections: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", connections
    finally:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    return head + await reader.readexactly(length)


def answering(*scripts: bytes, close_after: bool = True) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for script in scripts:
            await read_request(reader)
            writer.write(script)
            await writer.drain()
        if not close_after:
            await reader.read()

    return handler


async def aiohttp_fault(url: str) -> str:
    async with aiohttp.ClientSession() as session:
        try:
            async with session.post(url + "/v1/completions", data="{}") as r:
                await r.read()
        except aiohttp.ClientError as exc:
            return f"{type(exc).__name__}: {exc}"
    return "no fault"


async def own_fault(url: str) -> str:
    pool = UpstreamPool(connect_timeout=5)
    try:
        conn = await pool.post(url, "/v1/completions", b"{}", {})
        await conn.read_all()
    except aiohttp.ClientError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        pool.close()
    return "no fault"


@pytest.mark.parametrize(
    "script",
    [
        b"",  # closed before the head
        HEAD + b"5\r\nhel",  # closed mid-chunk
        HEAD + b"5\r\nhello\r\n",  # closed before the last chunk
        HEAD + b"5",  # closed mid size line
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello",  # closed short of its length
    ],
)
def test_a_connection_closed_early_fails_as_aiohttp_reported_it(script: bytes) -> None:
    async def body() -> None:
        async with raw_server(answering(script)) as (url, _):
            assert await own_fault(url) == await aiohttp_fault(url)

    run(body())


def test_a_refused_connection_fails_as_aiohttp_reported_it() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused

        async def body() -> None:
            ours = await own_fault(url)
            assert ours.startswith("ClientConnectorError: ") and ours == await aiohttp_fault(url)

        run(body())


def test_kept_alive_connections_are_reused() -> None:
    async def body() -> None:
        async with raw_server(answering(OK, OK, OK, close_after=False)) as (url, connections):
            pool = UpstreamPool(connect_timeout=5)
            for _ in range(3):
                conn = await pool.post(url, "/v1/completions", b"{}", {})
                assert await conn.read_all() == b"{}"
                pool.release(conn)
            pool.close()
            assert pool.opened == 1 and len(connections) == 1

    run(body())


def test_a_stale_connection_is_retried_once_on_a_new_one() -> None:
    async def body() -> None:
        async def first_then_hang_up(reader, writer) -> None:
            await read_request(reader)
            if len(connections) == 1:
                writer.write(OK)
                await writer.drain()
                await read_request(reader)  # the next request on it: closed unanswered
                return
            writer.write(OK)
            await writer.drain()
            await reader.read()

        async with raw_server(first_then_hang_up) as (url, connections):
            pool = UpstreamPool(connect_timeout=5)
            for _ in range(2):
                conn = await pool.post(url, "/v1/completions", b"{}", {})
                assert await conn.read_all() == b"{}"
                pool.release(conn)
            pool.close()
            assert len(connections) == 2

    run(body())


def test_a_connection_that_answered_a_byte_is_not_retried() -> None:
    async def body() -> None:
        async def first_then_half(reader, writer) -> None:
            await read_request(reader)
            writer.write(OK)
            await writer.drain()
            await read_request(reader)
            writer.write(b"HTTP/1.1 2")  # answered, then gone: the request may have run

        async with raw_server(first_then_half) as (url, connections):
            pool = UpstreamPool(connect_timeout=5)
            conn = await pool.post(url, "/v1/completions", b"{}", {})
            await conn.read_all()
            pool.release(conn)
            with pytest.raises(aiohttp.ServerDisconnectedError):
                await pool.post(url, "/v1/completions", b"{}", {})
            pool.close()
            assert len(connections) == 1

    run(body())


EVENT = b'data: {"choices":[{"text":"' + b"x" * 4000 + b'"}]}\n\n'
EVENTS = 12_000  # about 48 MB: far more than the sockets' buffers hold


def test_a_slow_client_pauses_the_upstream_and_gets_every_byte() -> None:
    sent: list[int] = [0]

    async def decode(reader, writer) -> None:
        await read_request(reader)
        writer.write(HEAD)
        for _ in range(EVENTS):
            writer.write(b"%x\r\n%b\r\n" % (len(EVENT), EVENT))
            sent[0] += len(EVENT)
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def body() -> None:
        async with (
            raw_server(decode) as (durl, _),
            running(settings_for(instance=(), mode="colocated")) as (base, proxy),
        ):
            proxy.pool.upsert(durl, "colocated", "colocated")
            request = json.dumps(
                {"model": "tiny", "prompt": "hi", "max_tokens": 5, "stream": True}
            ).encode()
            host, port = base.removeprefix("http://").split(":")
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            sock.connect((host, int(port)))
            sock.setblocking(False)
            reader, writer = await asyncio.open_connection(sock=sock)
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%b" % (len(request), request)
            )
            await asyncio.sleep(1.0)  # the client reads nothing meanwhile
            stalled_at = sent[0]
            assert stalled_at < EVENTS * len(EVENT) // 2
            got = await reader.read()
            writer.close()
            head, _, framed = got.partition(b"\r\n\r\n")
            body = Body(parse_head(head))
            events = body.feed(framed)
            assert body.done and events == EVENT * EVENTS
            log = proxy.requests[-1]
            assert log["outcome"] == "ok" and log["output_tokens"] == EVENTS

    run(body(), timeout=60)
