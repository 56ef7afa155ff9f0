"""The proxy's upstream client (connector/http/upstream.py) against a scripted upstream writing raw
bytes on loopback: its faults are the proxy's named ones, kept-alive connections are reused
(and a stale one retried once), a response split at any byte reads the same, and a slow
client pauses the upstream instead of filling the proxy's memory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from connector.errors import ConnectFailed, ConnectionLost
from connector.http.upstream import UpstreamConnection, UpstreamPool
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


async def fault_of(url: str) -> BaseException | None:
    pool = UpstreamPool(connect_timeout=5)
    try:
        conn = await pool.post(url, "/v1/completions", b"{}", {})
        await conn.read_all()
    except Exception as exc:
        return exc
    finally:
        pool.close()
    return None


@pytest.mark.parametrize(
    "script",
    [
        b"",  # closed before the head
        b"HTTP/1.1 200 OK\r\nContent-Le",  # closed mid-head
        HEAD + b"5\r\nhel",  # closed mid-chunk
        HEAD + b"5\r\nhello\r\n",  # closed before the last chunk
        HEAD + b"5",  # closed mid size line
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello",  # closed short of its length
    ],
)
def test_a_connection_closed_early_is_connection_lost(script: bytes) -> None:
    async def body() -> None:
        async with raw_server(answering(script)) as (url, _):
            fault = await fault_of(url)
        assert isinstance(fault, ConnectionLost) and fault.cause == "reset", fault
        assert "closed the connection" in str(fault)

    run(body())


def test_a_refused_connection_is_connect_failed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused

        async def body() -> None:
            fault = await fault_of(f"http://127.0.0.1:{port}")
            assert isinstance(fault, ConnectFailed) and fault.cause == "refused"
            assert f"127.0.0.1:{port}" in str(fault)

        run(body())


def test_a_body_until_close_ends_with_its_connection() -> None:
    async def body() -> None:
        script = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}"
        async with raw_server(answering(script)) as (url, _):
            pool = UpstreamPool(connect_timeout=5)
            conn = await pool.post(url, "/v1/completions", b"{}", {})
            assert await conn.read_all() == b"{}" and not conn.reusable
            pool.close()

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
            with pytest.raises(ConnectionLost):
                await pool.post(url, "/v1/completions", b"{}", {})
            pool.close()
            assert len(connections) == 1

    run(body())


def test_bytes_after_the_answer_are_not_read_as_the_next_answer() -> None:
    """An upstream that answers one request twice: the first answer is read, the second is
    never taken for the next request's (the connection is dropped)."""

    async def body() -> None:
        async with raw_server(answering(OK + OK, OK, close_after=False)) as (url, connections):
            pool = UpstreamPool(connect_timeout=5)
            conn = await pool.post(url, "/v1/completions", b"{}", {})
            assert await conn.read_all() == b"{}"
            for _ in range(100):
                if conn.closed:
                    break
                await asyncio.sleep(0.01)
            pool.release(conn)
            conn = await pool.post(url, "/v1/completions", b"{}", {})
            assert await conn.read_all() == b"{}"
            pool.close()
            assert pool.opened == 2 and len(connections) == 2

    run(body())


# -- a response split at every byte -----------------------------------------------------------


class Received:
    """Counts the bytes the client's connections were handed, so the upstream can wait until
    each piece it wrote arrived on its own."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.changed = asyncio.Event()
        original = UpstreamConnection.data_received

        def data_received(conn: UpstreamConnection, data: bytes) -> None:
            self.count += len(data)
            self.changed.set()
            original(conn, data)

        monkeypatch.setattr(UpstreamConnection, "data_received", data_received)

    async def reach(self, count: int) -> None:
        while self.count < count:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 5)


def _chunked(*pieces: bytes, ext: bytes = b"", trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x%b\r\n%b\r\n" % (len(p), ext, p) for p in pieces)
    return HEAD + body + b"0\r\n" + trailer + b"\r\n"


EVENT = b'data: {"choices":[{"text":" w"}]}\n\n'
SPLIT = {
    "length": (OK, b"{}"),
    "chunked": (_chunked(EVENT, EVENT), EVENT * 2),
    "extensions": (_chunked(EVENT, ext=b';a=b;q="x y"'), EVENT),
    "trailer": (_chunked(EVENT, trailer=b"X-Checksum: 1\r\n"), EVENT),
}


@pytest.mark.parametrize("name", SPLIT)
def test_a_response_split_at_every_byte_reads_the_same_and_is_reused(monkeypatch, name) -> None:
    script, payload = SPLIT[name]
    received = Received(monkeypatch)

    async def bytewise(reader, writer) -> None:
        while True:  # one request after another on the connection
            await read_request(reader)
            start = received.count
            for i in range(len(script)):
                writer.write(script[i : i + 1])
                await writer.drain()
                await received.reach(start + i + 1)

    async def body() -> None:
        async with raw_server(bytewise) as (url, _):
            pool = UpstreamPool(connect_timeout=5)
            for _ in range(2):
                conn = await pool.post(url, "/v1/completions", b"{}", {})
                assert await conn.read_all() == payload
                pool.release(conn)
            pool.close()
            assert pool.opened == 1

    run(body())


@pytest.mark.parametrize("name", ["length", "chunked"])
def test_a_response_cut_in_two_at_each_byte_reads_the_same_on_one_connection(
    monkeypatch, name
) -> None:
    script, payload = SPLIT[name]
    received = Received(monkeypatch)

    async def in_two(reader, writer) -> None:
        for cut in range(1, len(script)):
            await read_request(reader)
            start = received.count
            writer.write(script[:cut])
            await writer.drain()
            await received.reach(start + cut)
            writer.write(script[cut:])
            await writer.drain()
        await reader.read()

    async def body() -> None:
        async with raw_server(in_two) as (url, _):
            pool = UpstreamPool(connect_timeout=5)
            for _ in range(1, len(script)):
                conn = await pool.post(url, "/v1/completions", b"{}", {})
                assert await conn.read_all() == payload
                pool.release(conn)
            pool.close()
            assert pool.opened == 1

    run(body(), timeout=60)


# -- a slow client -----------------------------------------------------------------------------

EVENT_4K = b'data: {"choices":[{"text":"' + b"x" * 4000 + b'"}]}\n\n'
EVENTS = 12_000  # about 48 MB: far more than the sockets' buffers hold


def _dechunk(framed: bytes) -> bytes:
    out, i = [], 0
    while True:
        end = framed.index(b"\r\n", i)
        size = int(framed[i:end], 16)
        if not size:
            return b"".join(out)
        out.append(framed[end + 2 : end + 2 + size])
        i = end + 4 + size


def test_a_slow_client_pauses_the_upstream_and_gets_every_byte() -> None:
    sent: list[int] = [0]

    async def decode(reader, writer) -> None:
        await read_request(reader)
        writer.write(HEAD)
        for _ in range(EVENTS):
            writer.write(b"%x\r\n%b\r\n" % (len(EVENT_4K), EVENT_4K))
            sent[0] += len(EVENT_4K)
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
            assert stalled_at < EVENTS * len(EVENT_4K) // 2
            got = await reader.read()
            writer.close()
            _, _, framed = got.partition(b"\r\n\r\n")
            assert _dechunk(framed) == EVENT_4K * EVENTS
            log = proxy.requests[-1]
            assert log["outcome"] == "ok" and log["output_tokens"] == EVENTS

    run(body(), timeout=60)
