"""The fast path to the client (connector/client_stream.py): byte for byte what aiohttp's own
StreamWriter sends for the same chunks, only for a chunked answer on the proxy's own
connections, and the client's flow control (a slow client drained, a gone one ClientGone)."""

from __future__ import annotations

import asyncio
import random

import pytest
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_writer import StreamWriter
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from connector.http.client_stream import DRAIN_ABOVE, ChunkedOut, ClientGone, fast_out
from connector.http.read_deadlines import ClientConnection


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.sent = bytearray()
        self.closing = False
        self.queued = 0  # what get_write_buffer_size reports

    def write(self, data) -> None:
        self.sent += data

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.sent += chunk

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.queued


def connection(transport: FakeTransport) -> ClientConnection:
    conn = ClientConnection(asyncio.Protocol(), 5.0, asyncio.get_running_loop())
    conn.connection_made(transport)
    return conn


def event_chunks(rng: random.Random) -> list[bytes]:
    sizes = [rng.choice((1, 2, 15, 16, 17, 160, 255, 256, 4095, 4096, 70_000)) for _ in range(40)]
    return [bytes(rng.getrandbits(8) for _ in range(n)) for n in sizes]


@pytest.mark.parametrize("seed", range(5))
def test_chunks_are_framed_byte_for_byte_as_aiohttp_frames_them(seed: int) -> None:
    asyncio.run(framed_alike(event_chunks(random.Random(seed))))


async def framed_alike(chunks: list[bytes]) -> None:
    wire = FakeTransport()
    protocol = BaseProtocol(asyncio.get_running_loop())
    protocol.connection_made(wire)
    writer = StreamWriter(protocol, asyncio.get_running_loop())
    writer.enable_chunking()
    await writer.write_headers("HTTP/1.1 200 OK", CIMultiDict())
    writer.send_headers()
    head = bytes(wire.sent)
    for chunk in chunks:
        await writer.write(chunk)
    ours = FakeTransport()
    out = ChunkedOut(connection(ours))
    for chunk in chunks:
        assert out.send(chunk) is False
    assert bytes(ours.sent) == bytes(wire.sent)[len(head) :]
    assert out.send(b"") is False and bytes(ours.sent) == bytes(wire.sent)[len(head) :]


def test_only_a_chunked_plain_answer_on_the_proxys_connection_takes_the_fast_path() -> None:
    asyncio.run(only_plain_chunked())


async def only_plain_chunked() -> None:
    chunked = web.StreamResponse()
    chunked.enable_chunked_encoding()
    assert fast_out(make_mocked_request("POST", "/v1/completions"), chunked) is None  # not ours
    request = make_mocked_request("POST", "/v1/completions")
    conn = connection(FakeTransport())
    request.transport.get_protocol.return_value = conn
    conn.transport = request.transport
    out = fast_out(request, chunked)
    assert out is not None and out.conn is conn
    assert fast_out(request, web.StreamResponse()) is None  # HTTP/1.0: not chunked
    compressed = web.StreamResponse()
    compressed.enable_chunked_encoding()
    compressed.enable_compression()
    assert fast_out(request, compressed) is None


def test_a_slow_client_is_drained_and_a_gone_one_is_client_gone() -> None:
    asyncio.run(drained_and_gone())


async def drained_and_gone() -> None:
    transport = FakeTransport()
    conn = connection(transport)
    out = ChunkedOut(conn)
    transport.queued = DRAIN_ABOVE + 1
    assert out.send(b"data: {}\n\n") is True
    await out.drain()  # not paused: at once
    conn.pause_writing()
    draining = asyncio.ensure_future(out.drain())
    await asyncio.sleep(0)
    assert not draining.done()  # waits while the client's socket is full
    conn.resume_writing()
    await asyncio.wait_for(draining, 1)
    conn.pause_writing()
    draining = asyncio.ensure_future(out.drain())
    await asyncio.sleep(0)
    conn.connection_lost(None)
    with pytest.raises(ClientGone):
        await asyncio.wait_for(draining, 1)
    with pytest.raises(ClientGone):
        await out.drain()
    transport.closing = True
    with pytest.raises(ClientGone):
        out.send(b"data: {}\n\n")
