"""A client that sends its request head a line at a time, or never finishes its body, loses
the connection at the deadline (raw sockets against a running proxy)."""

import asyncio
import time

import pytest

from connector.settings import FlagInstance
from tests.connector.fakes import FakeEngine, engines, run, running, settings_for


async def _raw(base: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = base[len("http://") :].split(":")
    return await asyncio.open_connection(host, int(port))


async def _closed_after(reader: asyncio.StreamReader, seconds: float) -> tuple[float, bytes]:
    started = time.monotonic()
    data = await asyncio.wait_for(reader.read(), seconds)  # b"" or an answer, then EOF
    return time.monotonic() - started, data


@pytest.mark.parametrize("first", [b"GET /health HTTP/1.1", b"POST /v1/completions HTTP/1.1"])
def test_a_head_sent_a_line_at_a_time_is_cut_off_at_the_deadline(first):
    async def body():
        settings = settings_for(mode="colocated", header_timeout=0.5)
        async with running(settings) as (base, _):
            reader, writer = await _raw(base)
            writer.write(first + b"\r\n")

            async def drip():
                for i in range(40):  # one header line every 0.2 s: never a whole head
                    await asyncio.sleep(0.2)
                    writer.write(f"X-Slow-{i}: a\r\n".encode())

            dripping = asyncio.create_task(drip())
            try:
                took, data = await _closed_after(reader, 5.0)
            finally:
                dripping.cancel()
                writer.close()
                await writer.wait_closed()
            assert data == b"" and 0.4 < took < 1.5, (took, data)

    run(body())


def test_a_prompt_head_on_a_kept_alive_connection_is_not_cut():
    async def body():
        settings = settings_for(mode="colocated", header_timeout=0.5)
        async with running(settings) as (base, _):
            reader, writer = await _raw(base)
            for _ in range(3):  # three requests, 0.4 s apart, on one connection
                writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
                assert head.startswith(b"HTTP/1.1 200")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                await asyncio.sleep(0.4)
            writer.close()
            await writer.wait_closed()

    run(body())


def test_a_body_that_never_finishes_gets_408_at_the_body_deadline():
    async def body():
        async with engines(FakeEngine("c")) as (c,):
            settings = settings_for(
                mode="colocated",
                instance=(FlagInstance(c.url),),
                body_timeout=0.5,
                header_timeout=5,
            )
            async with running(settings) as (base, _):
                reader, writer = await _raw(base)
                writer.write(
                    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                    b'Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{"mo'
                )
                started = time.monotonic()
                data = await asyncio.wait_for(reader.read(4096), 5.0)
                took = time.monotonic() - started
                writer.close()
                await writer.wait_closed()
                assert data.startswith(b"HTTP/1.1 408"), data[:200]
                assert b"--body-timeout" in data and took < 2.0
            assert not c.seen  # nothing reached the engine

    run(body())


def test_a_head_begun_after_a_kept_alive_answer_is_cut_off_at_the_deadline():
    async def body():
        settings = settings_for(mode="colocated", header_timeout=0.5)
        async with running(settings) as (base, _):
            reader, writer = await _raw(base)
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # never finished
            try:
                took, data = await _closed_after(reader, 5.0)
            finally:
                writer.close()
                await writer.wait_closed()
            assert data == b"" and 0.4 < took < 1.5, (took, data)

    run(body())
