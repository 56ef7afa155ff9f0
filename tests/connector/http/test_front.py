"""The proxy's own front (connector/http/front.py): which requests it reads itself, and that on a
raw socket its answers are HTTP/1.1 a client can read, one after another on a connection,
with aiohttp taking over whatever the front does not read."""

import asyncio
import json

import pytest

from connector.http import front_head
from connector.http.front_head import line_is_hot, may_be_hot, parse_hot_head
from tests.connector.fakes import FakeEngine, proxied, run

HOT = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"


def _head(*lines: bytes, first: bytes = HOT, length: bytes | None = b"10") -> bytes:
    extra = [b"Content-Length: " + length] if length is not None else []
    return b"\r\n".join([first, *lines, *extra])


def test_a_plain_completion_head_is_read_by_the_front():
    head = parse_hot_head(_head(b"X-Pdctl-Ttft-Parts: 1"))
    assert head is not None
    assert head.path == "/v1/completions" and head.length == 10 and not head.close
    assert head.headers["x-pdctl-ttft-parts"] == "1"  # case-insensitive, as aiohttp's
    chat = parse_hot_head(_head(first=b"POST /v1/chat/completions HTTP/1.1"))
    assert chat is not None and chat.path == "/v1/chat/completions"


def test_connection_close_is_kept():
    head = parse_hot_head(_head(b"Connection: Keep-Alive, close"))
    assert head is not None and head.close


@pytest.mark.parametrize(
    "raw",
    [
        _head(first=b"GET /v1/completions HTTP/1.1"),
        _head(first=b"POST /v1/completions HTTP/1.0"),
        _head(first=b"POST /v1/completions?x=1 HTTP/1.1"),
        _head(first=b"POST /metrics HTTP/1.1"),
        _head(first=b"POST  /v1/completions HTTP/1.1"),
        _head(b"Transfer-Encoding: chunked", length=None),
        _head(b"Transfer-Encoding: chunked"),
        _head(b"Expect: 100-continue"),
        _head(b"Content-Encoding: gzip"),
        _head(b"Connection: Upgrade", b"Upgrade: h2c"),
        _head(length=None),
        _head(b"Content-Length: 10"),  # twice
        _head(length=b"-1"),
        _head(length=b"1e3"),
        _head(length=b"9" * 30),
        _head(b"X-Name: caf\xc3\xa9"),  # not ASCII
        _head(b"X-Folded: a", b" continued"),  # obs-fold
        _head(b"Bad Name: a"),
        _head(b"NoColon"),
        _head(b"X-Bare-Cr: a\rb"),
        _head(b"X-Bare-Lf: a\nb"),
        _head(b"X-Nul: a\x00b"),
        _head(b"X-Big: " + b"a" * 9000),
    ],
)
def test_anything_unusual_is_aiohttps(raw):
    assert parse_hot_head(raw) is None


def test_a_head_read_again_from_known_lines_reads_the_same():
    raw = _head(b"Connection: close", b"User-Agent: x/1", b"X-Pdctl-Canary: secret")
    first, again = parse_hot_head(raw), parse_hot_head(raw)
    assert first == again and again is not None and again.close
    assert list(again.headers.items())[-1] == ("Content-Length", "10")
    assert b"X-Pdctl-Canary: secret" not in front_head._KNOWN  # a secret is not kept
    other = parse_hot_head(_head(b"User-Agent: x/1", length=b"99"))
    assert other is not None and other.length == 99 and not other.close


def test_the_request_line_decides_early():
    assert may_be_hot(b"PO") and may_be_hot(b"POST /v1/ch")
    assert not may_be_hot(b"GET ") and not may_be_hot(b"POST /admin")
    assert line_is_hot(b"POST /v1/chat/completions HTTP/1.1")
    assert not line_is_hot(b"POST /v1/chat/completions HTTP/1.0")


# -- on a raw socket against a running proxy -------------------------------------------------


async def _answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP/1.1 answer: its head, and its body with any chunked framing undone."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return head, body
            body += chunk[:-2]
    length = int(lower.split(b"content-length: ")[1].split(b"\r\n")[0])
    return head, await reader.readexactly(length)


def _post(body: dict, *headers: bytes, path: bytes = b"/v1/completions") -> bytes:
    raw = json.dumps(body).encode()
    lines = [b"POST " + path + b" HTTP/1.1", b"Host: x", b"Content-Type: application/json"]
    lines += [*headers, b"Content-Length: %d" % len(raw)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + raw


def _completion(stream: bool = True, **extra) -> dict:
    return {"model": "m", "prompt": "a b c", "max_tokens": 3, "stream": stream, **extra}


async def _connect(base: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = base[len("http://") :].split(":")
    return await asyncio.open_connection(host, int(port))


def _tokens(body: bytes) -> int:
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: {")]
    return sum(1 for e in events if json.loads(e[6:]).get("choices"))


def test_front_and_aiohttp_answers_take_turns_on_one_connection():
    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, proxy):
            reader, writer = await _connect(base)
            try:
                writer.write(_post(_completion()))
                head, data = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
                assert b"Server:" not in head  # the front's, not aiohttp's
                assert _tokens(data) == 3 and data.endswith(b"data: [DONE]\n\n")
                writer.write(_post(_completion(stream=False)))
                head, data = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and json.loads(data)["choices"]
                writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # aiohttp's from here
                head, data = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and b"Server:" in head
                for _ in range(2):  # the front's again, then aiohttp's again
                    writer.write(_post(_completion()))
                    head, data = await _answer(reader)
                    assert head.startswith(b"HTTP/1.1 200") and _tokens(data) == 3
                    assert b"Server:" not in head
                    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                    head, data = await _answer(reader)
                    assert head.startswith(b"HTTP/1.1 200") and b"Server:" in head
                    assert b"pdctl_proxy" in data
            finally:
                writer.close()
            assert [r["outcome"] for r in proxy.requests][-4:] == ["ok"] * 4

    run(body())


def test_pipelined_requests_and_a_body_in_pieces_are_answered_in_order():
    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            reader, writer = await _connect(base)
            try:
                first = _post(_completion(max_tokens=2))
                second = _post(_completion(stream=False, max_tokens=4))
                writer.write(first + second)  # both at once
                head, data = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and _tokens(data) == 2
                head, data = await _answer(reader)
                assert json.loads(data)["usage"]["completion_tokens"] == 4
                third = _post(_completion(max_tokens=1))
                for i in range(0, len(third), 7):  # head and body a few bytes at a time
                    writer.write(third[i : i + 7])
                    await asyncio.sleep(0.001)
                head, data = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and _tokens(data) == 1
            finally:
                writer.close()

    run(body())


def test_connection_close_is_honoured_after_the_answer():
    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            reader, writer = await _connect(base)
            writer.write(_post(_completion(stream=False), b"Connection: close"))
            head, _ = await _answer(reader)
            assert head.startswith(b"HTTP/1.1 200")
            assert await asyncio.wait_for(reader.read(), 5) == b""  # then the proxy closes
            writer.close()

    run(body())


def test_a_body_over_the_limit_is_413_naming_the_flag_and_not_waited_for():
    async def body():
        d = FakeEngine("d")
        async with proxied([FakeEngine("p")], [d], max_body_bytes=2048) as (base, _):
            reader, writer = await _connect(base)
            writer.write(HOT + b"\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 100)
            head, data = await _answer(reader)  # at once: the rest of the body is not read
            assert head.startswith(b"HTTP/1.1 413") and b"Connection: close" in head
            assert "--max-body-bytes" in json.loads(data)["error"]["message"]
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            # a whole body over the limit: 413, and the connection goes on
            reader, writer = await _connect(base)
            try:
                writer.write(_post(_completion(prompt="x " * 2000)))
                head, _ = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 413")
                writer.write(_post(_completion(max_tokens=1)))
                head, data = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and _tokens(data) == 1
            finally:
                writer.close()
            assert len(d.seen) == 1

    run(body())


def test_bad_json_is_a_400_naming_the_body_and_the_connection_stays():
    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            reader, writer = await _connect(base)
            try:
                raw = b"{not json"
                writer.write(HOT + b"\r\nContent-Length: %d\r\n\r\n" % len(raw) + raw)
                head, data = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 400")
                assert json.loads(data)["error"]["message"]
                writer.write(_post(_completion(max_tokens=1)))  # the connection goes on
                head, data = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and _tokens(data) == 1
            finally:
                writer.close()

    run(body())


def test_a_chunked_request_body_is_served_by_aiohttp():
    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            reader, writer = await _connect(base)
            try:
                raw = json.dumps(_completion(max_tokens=2)).encode()
                writer.write(
                    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + b"%x\r\n%b\r\n0\r\n\r\n"
                    % (len(raw), raw)
                )
                head, data = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and b"Server:" in head
                assert _tokens(data) == 2
            finally:
                writer.close()

    run(body())


def test_a_client_that_hangs_up_mid_stream_cancels_its_request():
    async def body():
        d = FakeEngine("d", token_delay=0.05)
        async with proxied([FakeEngine("p")], [d]) as (base, proxy):
            reader, writer = await _connect(base)
            writer.write(_post(_completion(max_tokens=200)))
            await asyncio.wait_for(reader.readuntil(b"data: "), 5)  # the stream has begun
            writer.close()
            for _ in range(100):
                if len(proxy.requests):
                    break
                await asyncio.sleep(0.05)
            assert [r["outcome"] for r in proxy.requests] == ["cancelled"]

    run(body())


def test_shutdown_closes_an_idle_kept_alive_connection():
    async def body():
        reader = writer = None
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            reader, writer = await _connect(base)
            writer.write(_post(_completion(max_tokens=1)))
            await _answer(reader)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the shutdown
        writer.close()

    run(body())


# -- the front alone, with a generate of the test's own --------------------------------------


async def _front(generate, head_timeout: float = 5.0):
    from connector.http.front import FrontServer

    def delegate():  # what aiohttp would be: answers anything with 418
        class Teapot(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport = transport

            def data_received(self, data):
                self.transport.write(b"HTTP/1.1 418 I'm a teapot\r\nContent-Length: 0\r\n\r\n")

        return Teapot()

    front = FrontServer(generate, delegate, head_timeout, 1 << 20)
    server = await asyncio.get_running_loop().create_server(front, "127.0.0.1", 0)
    return front, server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def test_a_failure_inside_the_proxy_is_a_500_not_a_hang():
    async def generate(request):
        raise RuntimeError("a bug")

    async def body():
        front, server, base = await _front(generate)
        try:
            reader, writer = await _connect(base)
            writer.write(_post(_completion()))
            head, data = await _answer(reader)
            assert head.startswith(b"HTTP/1.1 500") and b"Connection: close" in head
            assert json.loads(data)["error"]["type"] == "InternalServerError"
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
        finally:
            server.close()
            await front.shutdown(1)

    run(body())


def test_a_hot_head_sent_a_line_at_a_time_is_cut_off_at_the_deadline():
    async def generate(request):  # never reached
        raise AssertionError

    async def body():
        front, server, base = await _front(generate, head_timeout=0.5)
        try:
            reader, writer = await _connect(base)
            writer.write(b"POST /v1/completions HTTP/1.1\r\n")
            started = asyncio.get_running_loop().time()

            async def drip():
                for i in range(40):
                    await asyncio.sleep(0.2)
                    writer.write(b"X-Slow-%d: a\r\n" % i)

            dripping = asyncio.create_task(drip())
            data = await asyncio.wait_for(reader.read(), 5)
            took = asyncio.get_running_loop().time() - started
            dripping.cancel()
            writer.close()
            assert data == b"" and 0.4 < took < 1.5, (took, data)
        finally:
            server.close()
            await front.shutdown(1)

    run(body())


def test_what_the_front_does_not_read_goes_to_the_delegate_with_every_byte():
    async def generate(request):
        raise AssertionError

    async def body():
        front, server, base = await _front(generate)
        try:
            for first in (b"GE", b"POST /v1/completions HTTP/1.0\r\n", b"POST /v1/completions"):
                reader, writer = await _connect(base)
                writer.write(first)
                await asyncio.sleep(0.05)
                writer.write(b" HTTP/1.1\r\nHost: x\r\n\r\n")
                head, _ = await _answer(reader)  # the last: hot until its head had no length
                writer.close()
                assert head.startswith(b"HTTP/1.1 418")
        finally:
            server.close()
            await front.shutdown(1)

    run(body())


def test_an_idle_kept_alive_connection_closes_after_the_keepalive_timeout(monkeypatch):
    from connector.http import front as front_module

    monkeypatch.setattr(front_module, "KEEPALIVE_S", 0.3)
    monkeypatch.setattr(front_module, "SWEEP_S", 0.1)

    async def generate(request):
        from aiohttp import web

        await request.body()
        return web.Response(body=b"{}", content_type="application/json")

    async def body():
        front, server, base = await _front(generate)
        try:
            reader, writer = await _connect(base)
            writer.write(_post(_completion(stream=False)))
            head, data = await _answer(reader)
            assert head.startswith(b"HTTP/1.1 200") and data == b"{}"
            started = asyncio.get_running_loop().time()
            assert await asyncio.wait_for(reader.read(), 5) == b""
            assert asyncio.get_running_loop().time() - started < 2
            writer.close()
        finally:
            server.close()
            await front.shutdown(1)

    run(body())
