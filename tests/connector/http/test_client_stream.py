"""The fast path to the client (connector/http/client_stream.py): byte for byte what aiohttp's own
StreamWriter sends for the same chunks, and only where aiohttp would frame them the same way."""

from __future__ import annotations

import asyncio
import random

import pytest
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_writer import StreamWriter
from multidict import CIMultiDict

from connector.http.client_stream import DRAIN_ABOVE, ChunkedOut, ClientGone


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.sent = bytearray()
        self.closing = False
        self.queued = 0  # what get_write_buffer_size reports

    def write(self, data) -> None:  # type: ignore[override]
        self.sent += data

    def writelines(self, chunks) -> None:  # type: ignore[override]
        for chunk in chunks:
            self.sent += chunk

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.queued


async def writer_with_head(chunked: bool = True) -> tuple[StreamWriter, FakeTransport]:
    transport = FakeTransport()
    protocol = BaseProtocol(asyncio.get_running_loop())
    protocol.connection_made(transport)
    writer = StreamWriter(protocol, asyncio.get_running_loop())
    if chunked:
        writer.enable_chunking()
    await writer.write_headers("HTTP/1.1 200 OK", CIMultiDict({"Content-Type": "text/plain"}))
    writer.send_headers()
    return writer, transport


def event_chunks(rng: random.Random) -> list[bytes]:
    sizes = [rng.choice((1, 2, 15, 16, 17, 160, 255, 256, 4095, 4096, 70_000)) for _ in range(40)]
    return [bytes(rng.getrandbits(8) for _ in range(n)) for n in sizes]


@pytest.mark.parametrize("seed", range(5))
def test_chunks_are_framed_byte_for_byte_as_aiohttp_frames_them(seed: int) -> None:
    asyncio.run(framed_alike(event_chunks(random.Random(seed))))


async def framed_alike(chunks: list[bytes]) -> None:
    theirs, their_wire = await writer_with_head()
    for chunk in chunks:
        await theirs.write(chunk)
    await theirs.write_eof()
    ours, our_wire = await writer_with_head()
    out = ChunkedOut.of(our_wire, ours)
    assert out is not None
    for chunk in chunks:
        assert out.send(chunk) is False
    await ours.write_eof()
    assert bytes(our_wire.sent) == bytes(their_wire.sent)


def test_only_a_chunked_plain_response_with_its_head_sent_takes_the_fast_path() -> None:
    asyncio.run(only_plain_chunked())


async def only_plain_chunked() -> None:
    writer, transport = await writer_with_head(chunked=False)
    assert ChunkedOut.of(transport, writer) is None  # HTTP/1.0 or a declared length
    writer, transport = await writer_with_head()
    writer.enable_compression("deflate")
    assert ChunkedOut.of(transport, writer) is None
    writer, transport = await writer_with_head()
    assert ChunkedOut.of(None, writer) is None
    buffered = StreamWriter(writer.protocol, asyncio.get_running_loop())
    buffered.enable_chunking()
    await buffered.write_headers("HTTP/1.1 200 OK", CIMultiDict())
    assert ChunkedOut.of(transport, buffered) is None  # its head would go after our bytes


def test_a_client_that_hung_up_is_client_gone_and_a_slow_one_is_drained() -> None:
    asyncio.run(gone_and_drained())


async def gone_and_drained() -> None:
    writer, transport = await writer_with_head()
    out = ChunkedOut.of(transport, writer)
    assert out is not None
    transport.queued = DRAIN_ABOVE + 1
    assert out.send(b"data: {}\n\n") is True
    await out.drain()  # the protocol is not paused: returns at once
    transport.closing = True
    with pytest.raises(ClientGone):
        out.send(b"data: {}\n\n")
