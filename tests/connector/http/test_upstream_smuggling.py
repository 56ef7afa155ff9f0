"""Responses an upstream (or something between it and the proxy) could use to smuggle or
desync: each ends in the proxy's named fault (BadResponse), at once, on a connection that is
closed and never reused; through the proxy, the client gets a 502 naming the leg, never a 200
with the smuggled bytes. Valid forms of the same features (chunk extensions, one trailer)
are read as before."""

from __future__ import annotations

import asyncio
import json

import pytest

from connector.errors import BadResponse
from connector.http.upstream import MAX_FIELDS, MAX_STALL_BYTES, MAX_TRAILERS, UpstreamPool
from tests.connector.fakes import run, running, settings_for
from tests.connector.http.test_upstream import HEAD, raw_server, read_request

STATUS = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
EVENT = b'data: {"choices":[{"text":" w"}]}\n\n'
CHUNK = b"%x\r\n%b\r\n" % (len(EVENT), EVENT)


def trailers(n: int) -> bytes:
    return b"".join(b"X-T%d: 1\r\n" % i for i in range(n))


SMUGGLED = {
    "CL and TE": STATUS + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" + CHUNK,
    "TE and CL": STATUS + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" + CHUNK,
    "TE twice": STATUS
    + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
    + CHUNK,
    "TE not chunked": STATUS + b"Transfer-Encoding: gzip\r\n\r\n" + EVENT,
    "TE chunked then gzip": STATUS + b"Transfer-Encoding: chunked, gzip\r\n\r\n" + CHUNK,
    "two lengths": STATUS + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    "signed length": STATUS + b"Content-Length: +2\r\n\r\n{}",
    "size not hex": HEAD + b"3x\r\nabc\r\n0\r\n\r\n",
    "size negative": HEAD + b"-3\r\nabc\r\n0\r\n\r\n",
    "size overflow": HEAD + b"ffffffffffffffffff\r\nabc\r\n0\r\n\r\n",
    "size with space": HEAD + b"3 \r\nabc\r\n0\r\n\r\n",
    "data past its size": HEAD + b"3\r\nabcdef\r\n0\r\n\r\n",
    "extension with NUL": HEAD + b"3;a\x00b\r\nabc\r\n0\r\n\r\n",
    "extension bare LF": HEAD + b"3;a\nabc\r\n0\r\n\r\n",
    "extension bad quote": HEAD + b'3;a="b\r\nabc\r\n0\r\n\r\n',
    "extension too long": HEAD + b"3;a=" + b"b" * (MAX_STALL_BYTES + 1) + b"\r\nabc\r\n0\r\n\r\n",
    "too many trailers": HEAD + CHUNK + b"0\r\n" + trailers(MAX_TRAILERS + 1) + b"\r\n",
    "trailer too long": HEAD + CHUNK + b"0\r\nX-T: " + b"a" * (MAX_STALL_BYTES + 1) + b"\r\n\r\n",
    "trailer bare LF": HEAD + CHUNK + b"0\r\nX-T: a\nb\r\n\r\n",
    "bare CR in a value": STATUS + b"X-A: a\rb\r\nContent-Length: 2\r\n\r\n{}",
    "bare LF in a value": STATUS + b"X-A: a\nb\r\nContent-Length: 2\r\n\r\n{}",
    "NUL in a value": STATUS + b"X-A: a\x00b\r\nContent-Length: 2\r\n\r\n{}",
    "bare LF line ends": b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}",
    "obs-fold": STATUS + b"X-A: a\r\n b\r\nContent-Length: 2\r\n\r\n{}",
    "space before colon": STATUS + b"Content-Length : 2\r\n\r\n{}",
    "head too long": STATUS + b"X-A: " + b"a" * (MAX_STALL_BYTES + 1) + b"\r\n\r\n",
    "too many fields": STATUS + trailers(MAX_FIELDS + 1) + b"Content-Length: 2\r\n\r\n{}",
    "not HTTP": b"\x8f\x00<html>upstream exploded</html>\r\n\r\n",
    "bad status": b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}",
}
VALID = {
    "extension": (HEAD + b"%x;a=b\r\n%b\r\n0\r\n\r\n" % (len(EVENT), EVENT), EVENT),
    "quoted extension": (HEAD + b'%x;a="b c"\r\n%b\r\n0\r\n\r\n' % (len(EVENT), EVENT), EVENT),
    "trailers": (HEAD + CHUNK + b"0\r\n" + trailers(MAX_TRAILERS) + b"\r\n", EVENT),
}


def serving(script: bytes, requests: list[int]):
    """Answers the first request with `script`, then any later one with a plain 200."""

    async def handler(reader, writer) -> None:
        while True:
            await read_request(reader)
            requests.append(1)
            writer.write(script if len(requests) == 1 else HEAD + CHUNK + b"0\r\n\r\n")
            await writer.drain()
            if len(requests) == 1:
                await reader.read()  # the proxy must close it: EOF
                return

    return handler


@pytest.mark.parametrize("name", SMUGGLED)
def test_a_smuggling_response_is_bad_response_and_its_connection_is_dropped(name) -> None:
    async def body() -> None:
        requests: list[int] = []
        async with raw_server(serving(SMUGGLED[name], requests)) as (url, connections):
            pool = UpstreamPool(connect_timeout=5)
            with pytest.raises(BadResponse):
                async with asyncio.timeout(5):
                    conn = await pool.post(url, "/v1/completions", b"{}", {})
                    try:
                        await conn.read_all()
                    finally:
                        pool.release(conn)
            conn = await pool.post(url, "/v1/completions", b"{}", {})  # a new connection
            assert await conn.read_all() == EVENT
            pool.release(conn)
            pool.close()
            assert pool.opened == 2 and len(connections) == 2

    run(body())


@pytest.mark.parametrize("name", VALID)
def test_valid_extensions_and_trailers_are_read(name) -> None:
    script, payload = VALID[name]

    async def body() -> None:
        requests: list[int] = []
        async with raw_server(serving(script, requests)) as (url, _):
            pool = UpstreamPool(connect_timeout=5)
            conn = await pool.post(url, "/v1/completions", b"{}", {})
            assert await conn.read_all() == payload and conn.reusable
            pool.close()

    run(body())


THROUGH_PROXY = ["CL and TE", "extension with NUL", "too many trailers", "bare CR in a value"]


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("name", THROUGH_PROXY)
def test_through_the_proxy_a_smuggling_upstream_is_a_502_naming_it(name, stream) -> None:
    async def body() -> None:
        requests: list[int] = []
        async with (
            raw_server(serving(SMUGGLED[name], requests)) as (url, _),
            running(settings_for(mode="colocated", retry_attempts=1)) as (
                base,
                proxy,
            ),
        ):
            proxy.pool.upsert(url, "colocated", "colocated")
            request = {"model": "m", "prompt": "hi", "max_tokens": 2, "stream": stream}
            raw = json.dumps(request).encode()
            host, port = base.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n%b" % (len(raw), raw)
            )
            got = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            head, _, answer = got.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 502"), head  # no byte of it reached the client
            error = json.loads(answer)["error"]
            assert error["leg"] == "colocated" and error["instance"] == url
            assert error["message"].startswith(f"colocated leg to {url} failed: BadResponse")
            assert b"X-A" not in answer
            assert proxy.requests[-1]["outcome"] == "failed"

    run(body())


@pytest.mark.parametrize("name", ["size not hex", "extension with NUL", "too many trailers"])
def test_a_smuggled_chunk_after_a_token_ends_the_stream_with_an_error_event(name) -> None:
    """The client has a token already: the fault travels as the stream's last event, and none
    of the smuggled bytes are passed on."""
    bad = SMUGGLED[name].split(b"\r\n\r\n", 1)[1]  # the body only: after a good head and token
    token_seen = asyncio.Event()

    async def handler(reader, writer) -> None:
        await read_request(reader)
        writer.write(HEAD + CHUNK)
        await writer.drain()
        await token_seen.wait()
        writer.write(bad.replace(CHUNK, b"", 1) if name == "too many trailers" else bad)
        await writer.drain()
        await reader.read()

    async def body() -> None:
        async with (
            raw_server(handler) as (url, _),
            running(settings_for(mode="colocated", retry_attempts=1)) as (
                base,
                proxy,
            ),
        ):
            proxy.pool.upsert(url, "colocated", "colocated")
            raw = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 2, "stream": True})
            host, port = base.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n%b" % (len(raw), raw.encode())
            )
            first = await asyncio.wait_for(reader.readuntil(EVENT), 5)
            token_seen.set()
            rest = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            assert first.startswith(b"HTTP/1.1 200")
            assert b"BadResponse" in rest and b"abc" not in rest and rest.count(EVENT) == 0
            assert proxy.requests[-1]["outcome"] == "failed"

    run(body())
