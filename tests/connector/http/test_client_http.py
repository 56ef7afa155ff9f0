"""The proxy's client side over raw loopback sockets: one parser (aiohttp's) reads every
request on a connection, so any kind of request pipelined behind any other is answered, in
order, whether its bytes come in one buffer or one at a time; and the HTTP/1.1 details a
client relies on (Connection: close, 413 without waiting for the body, a chunked body).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from connector.http.read_deadlines import ClientConnection
from tests.connector.fakes import FakeEngine, proxied, run

Check = Callable[[bytes, bytes], None]


def _post(path: str, body: dict, *headers: bytes) -> bytes:
    raw = json.dumps(body).encode()
    lines = [b"POST " + path.encode() + b" HTTP/1.1", b"Host: x", b"Content-Type: application/json"]
    lines += [*headers, b"Content-Length: %d" % len(raw)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + raw


def _get(path: str) -> bytes:
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n"


def _completion(max_tokens: int = 3, stream: bool = True, **extra: object) -> dict:
    return {"model": "m", "prompt": "a b c", "max_tokens": max_tokens, "stream": stream, **extra}


def _tokens(body: bytes) -> int:
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: {")]
    return sum(1 for e in events if json.loads(e[6:]).get("choices"))


def _streamed(tokens: int) -> Check:
    def check(head: bytes, body: bytes) -> None:
        assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head, head
        assert _tokens(body) == tokens and body.endswith(b"data: [DONE]\n\n"), body[-200:]

    return check


def _whole(head: bytes, body: bytes) -> None:
    assert head.startswith(b"HTTP/1.1 200"), head
    assert json.loads(body)["usage"]["completion_tokens"] == 4


def _json_ok(head: bytes, body: bytes) -> None:
    assert head.startswith(b"HTTP/1.1 200"), head
    assert isinstance(json.loads(body), dict)


def _metrics(head: bytes, body: bytes) -> None:
    assert head.startswith(b"HTTP/1.1 200") and b"pdctl_proxy" in body, head


def _not_found(head: bytes, body: bytes) -> None:
    assert head.startswith(b"HTTP/1.1 404"), head
    assert json.loads(body)["error"]["message"]


@dataclass(frozen=True)
class Kind:
    raw: bytes
    check: Check


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
KINDS = {
    "completion stream": Kind(_post("/v1/completions", _completion()), _streamed(3)),
    "completion whole": Kind(_post("/v1/completions", _completion(4, stream=False)), _whole),
    "chat stream": Kind(_post("/v1/chat/completions", {**CHAT, "stream": True}), _streamed(2)),
    "health": Kind(_get("/health"), _json_ok),
    "metrics": Kind(_get("/metrics"), _metrics),
    "models": Kind(_get("/v1/models"), _json_ok),
    "admin get": Kind(_get("/admin/instances"), _json_ok),
    "admin post": Kind(_post("/admin/instances/drain", {"url": "http://nowhere:1"}), _not_found),
}


async def _connect(base: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = base[len("http://") :].split(":")
    return await asyncio.open_connection(host, int(port))


async def _answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One response off the connection: its head and its body (by length or chunks)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    if fields.get(b"transfer-encoding") == b"chunked":
        parts = []
        while size := int((await asyncio.wait_for(reader.readuntil(b"\r\n"), 10))[:-2], 16):
            parts.append(await reader.readexactly(size))
            assert await reader.readexactly(2) == b"\r\n"
        assert await reader.readexactly(2) == b"\r\n"
        return head, b"".join(parts)
    return head, await asyncio.wait_for(reader.readexactly(int(fields[b"content-length"])), 10)


class Delivered:
    """Counts the bytes the proxy's connections have been handed, so a client can wait until
    each byte it wrote arrived alone."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.largest = 0  # the most bytes handed over at once
        self.changed: asyncio.Event | None = None
        original = ClientConnection.data_received

        def data_received(conn: ClientConnection, data: bytes) -> None:
            self.count += len(data)
            self.largest = max(self.largest, len(data))
            if self.changed is not None:
                self.changed.set()
            original(conn, data)

        monkeypatch.setattr(ClientConnection, "data_received", data_received)

    async def write_bytewise(self, writer: asyncio.StreamWriter, raw: bytes) -> None:
        self.changed = self.changed or asyncio.Event()
        start = self.count
        for i in range(len(raw)):
            writer.write(raw[i : i + 1])
            while self.count < start + i + 1:
                self.changed.clear()
                await asyncio.wait_for(self.changed.wait(), 5)


async def _pipeline(base: str, names: tuple[str, ...], delivered: Delivered | None) -> None:
    reader, writer = await _connect(base)
    try:
        raw = b"".join(KINDS[name].raw for name in names)
        if delivered is None:
            writer.write(raw)
        else:
            await delivered.write_bytewise(writer, raw)
        for name in names:
            head, body = await _answer(reader)
            try:
                KINDS[name].check(head, body)
            except AssertionError as exc:
                raise AssertionError(f"{name!r} in the pipeline {names}: {exc}") from None
    finally:
        writer.close()


COMPLETIONS = {"completion stream", "completion whole", "chat stream"}


@pytest.mark.parametrize("first", KINDS)
@pytest.mark.parametrize("bytewise", [False, True], ids=["one buffer", "byte by byte"])
def test_every_kind_of_request_behind_every_other_is_answered_in_order(
    monkeypatch, bytewise, first
):
    delivered = Delivered(monkeypatch) if bytewise else None
    pairs = [(first, second) for second in KINDS] + [(second, first) for second in KINDS]

    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, proxy):
            for pair in pairs:
                await _pipeline(base, pair, delivered)
            outcomes = [r["outcome"] for r in proxy.requests]
            served = sum(name in COMPLETIONS for pair in pairs for name in pair)
            assert outcomes == ["ok"] * served, outcomes
        if delivered is not None:  # every byte came, each alone
            assert delivered.count == sum(len(KINDS[a].raw + KINDS[b].raw) for a, b in pairs)
            assert delivered.largest == 1

    run(body(), timeout=60)


def test_every_kind_twice_in_one_pipeline_on_one_connection():
    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            names = (*KINDS, *reversed(KINDS))
            await _pipeline(base, names, None)

    run(body())


@pytest.mark.parametrize(
    "first,second", [("completion whole", "health"), ("health", "completion whole")]
)
def test_a_pipeline_split_in_two_at_every_byte_is_answered_in_order(monkeypatch, first, second):
    delivered = Delivered(monkeypatch)

    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            raw = KINDS[first].raw + KINDS[second].raw
            reader, writer = await _connect(base)
            try:
                for cut in range(1, len(raw)):
                    delivered.changed = delivered.changed or asyncio.Event()
                    target = delivered.count + cut
                    writer.write(raw[:cut])
                    while delivered.count < target:
                        delivered.changed.clear()
                        await asyncio.wait_for(delivered.changed.wait(), 5)
                    writer.write(raw[cut:])
                    for name in (first, second):
                        KINDS[name].check(*await _answer(reader))
            finally:
                writer.close()

    run(body(), timeout=90)


def test_connection_close_is_honoured_after_the_answer():
    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            reader, writer = await _connect(base)
            writer.write(_post("/v1/completions", _completion(stream=False), b"Connection: close"))
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
            head = _post("/v1/completions", {}).split(b"Content-Length")[0]
            writer.write(head + b"Content-Length: 1000000\r\n\r\n" + b"x" * 100)
            head, data = await _answer(reader)  # at once: the rest of the body is not read
            assert head.startswith(b"HTTP/1.1 413") and b"Connection: close" in head
            assert "--max-body-bytes" in json.loads(data)["error"]["message"]
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            reader, writer = await _connect(base)  # a whole body over the limit: the same
            try:
                writer.write(_post("/v1/completions", _completion(prompt="x " * 2000)))
                head, _ = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 413")
            finally:
                writer.close()
            assert not d.seen

    run(body())


def test_bad_json_is_a_400_naming_the_body_and_the_connection_stays():
    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            reader, writer = await _connect(base)
            try:
                raw = b"{not json"
                head = _post("/v1/completions", {}).split(b"Content-Length")[0]
                writer.write(head + b"Content-Length: %d\r\n\r\n" % len(raw) + raw)
                head, data = await _answer(reader)
                assert head.startswith(b"HTTP/1.1 400")
                assert json.loads(data)["error"]["param"] == "body"
                writer.write(_post("/v1/completions", _completion(max_tokens=1)))
                head, data = await _answer(reader)  # the connection goes on
                assert head.startswith(b"HTTP/1.1 200") and _tokens(data) == 1
            finally:
                writer.close()

    run(body())


def test_a_chunked_request_body_is_served():
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
                assert head.startswith(b"HTTP/1.1 200") and _tokens(data) == 2
            finally:
                writer.close()

    run(body())


def test_an_http10_client_gets_its_stream_until_the_connection_closes():
    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            reader, writer = await _connect(base)
            raw = _post("/v1/completions", _completion(max_tokens=3))
            writer.write(raw.replace(b"HTTP/1.1", b"HTTP/1.0", 1))
            got = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            head, _, data = got.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
            assert _tokens(data) == 3 and data.endswith(b"data: [DONE]\n\n")

    run(body())


def test_a_client_that_hangs_up_mid_stream_cancels_its_request():
    async def body():
        d = FakeEngine("d", token_delay=0.05)
        async with proxied([FakeEngine("p")], [d]) as (base, proxy):
            reader, writer = await _connect(base)
            writer.write(_post("/v1/completions", _completion(max_tokens=200)))
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
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            reader, writer = await _connect(base)
            writer.write(_post("/v1/completions", _completion(max_tokens=1)))
            await _answer(reader)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the shutdown
        writer.close()

    run(body())


def test_an_idle_kept_alive_connection_closes_after_the_keepalive_timeout(monkeypatch):
    from connector import proxy as proxy_module

    monkeypatch.setitem(proxy_module.RUNNER_KWARGS, "keepalive_timeout", 0.3)

    async def body():
        async with proxied([FakeEngine("p")], [FakeEngine("d")]) as (base, _):
            reader, writer = await _connect(base)
            writer.write(_post("/v1/completions", _completion(stream=False)))
            head, _ = await _answer(reader)
            assert head.startswith(b"HTTP/1.1 200")
            started = asyncio.get_running_loop().time()
            assert await asyncio.wait_for(reader.read(), 5) == b""
            assert asyncio.get_running_loop().time() - started < 2
            writer.close()

    run(body())


HOT = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
BODY = json.dumps(_completion(max_tokens=1)).encode()
REFUSED = {
    "CL and TE": b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(BODY),
    "TE not chunked": b"Transfer-Encoding: gzip\r\nContent-Length: %d\r\n" % len(BODY),
    "two lengths": b"Content-Length: %d\r\nContent-Length: 3\r\n" % len(BODY),
    "signed length": b"Content-Length: +%d\r\n" % len(BODY),
    "length not digits": b"Content-Length: 1e3\r\n",
    "bare CR in a value": b"X-A: a\rb\r\nContent-Length: %d\r\n" % len(BODY),
    "bare LF in a value": b"X-A: a\nb\r\nContent-Length: %d\r\n" % len(BODY),
    "NUL in a value": b"X-A: a\x00b\r\nContent-Length: %d\r\n" % len(BODY),
    "obs-fold": b"X-A: a\r\n b\r\nContent-Length: %d\r\n" % len(BODY),
    "space before colon": b"Content-Length : %d\r\n" % len(BODY),
    "bad name": b"Bad Name: a\r\nContent-Length: %d\r\n" % len(BODY),
    "no colon": b"NoColon\r\nContent-Length: %d\r\n" % len(BODY),
}


@pytest.mark.parametrize("name", REFUSED)
def test_a_smuggling_request_is_400_reaches_no_engine_and_ends_its_connection(name):
    async def body():
        d = FakeEngine("d")
        async with proxied([FakeEngine("p")], [d]) as (base, proxy):
            reader, writer = await _connect(base)
            behind = _post("/v1/completions", _completion(max_tokens=1))
            writer.write(HOT + REFUSED[name] + b"\r\n" + BODY + behind)
            head, _ = await _answer(reader)
            assert head.split(b" ", 2)[1] == b"400", head  # aiohttp's parser refused it
            assert await asyncio.wait_for(reader.read(), 5) == b""  # nothing behind it is read
            writer.close()
            assert not d.seen and not len(proxy.requests)

    run(body())
