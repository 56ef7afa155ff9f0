"""The streaming client against a real loopback SSE server."""

from __future__ import annotations

import asyncio
import time

import pytest

from bench.client import BenchClient, ServerUnreachable, fetch_model, open_session
from bench.config import BenchConfig
from bench.records import RequestRecord
from domain.workload.datasets import BenchRequest, Message
from tests.bench.sse_server import FakeEngine, serving


def _request(prompt_len: int = 8, output_len: int = 5) -> BenchRequest:
    return BenchRequest(
        messages=(Message("user", tuple(range(prompt_len))),), output_len=output_len
    )


def _send(
    engine: FakeEngine, model: str = "ok", request: BenchRequest | None = None, **flags: object
) -> RequestRecord:
    async def go() -> RequestRecord:
        async with serving(engine) as url:
            config = BenchConfig(base_url=url, **flags)
            async with open_session(config) as session:
                client = BenchClient(session, config, model)
                return await client.send(request or _request(), index=3)

    return asyncio.run(go())


def test_streamed_completion_gives_ttft_and_one_itl_per_later_token() -> None:
    engine = FakeEngine(token_delay=0.01, first_token_delay=0.02)
    record = _send(engine, request=_request(prompt_len=8, output_len=5))
    assert record.ok, record.error
    assert record.index == 3
    assert record.output_tokens == 5
    assert record.prompt_tokens == 8
    assert len(record.itl) == 4
    # the server cannot answer sooner than its delays; upper bounds stay loose for busy hosts
    assert record.ttft >= 0.02
    assert record.e2el >= 0.02 + 4 * 0.01
    assert record.e2el >= record.ttft + sum(record.itl) - 1e-6
    assert record.tpot is not None and 0.005 < record.tpot < 1.0


def test_payload_asks_for_exact_streamed_output_with_usage() -> None:
    engine = FakeEngine()
    _send(engine, request=_request(output_len=3))
    payload = engine.payloads[0]
    assert payload["max_tokens"] == 3
    assert payload["stream"] is True
    assert payload["stream_options"] == {"include_usage": True}
    assert payload["ignore_eos"] is True
    assert isinstance(payload["prompt"], str)


def test_prompt_can_go_as_token_ids() -> None:
    engine = FakeEngine()
    record = _send(engine, request=_request(prompt_len=6), prompt_token_ids=True)
    assert engine.payloads[0]["prompt"] == [0, 1, 2, 3, 4, 5]
    assert record.ok and record.prompt_tokens == 6


def test_chat_role_chunk_is_not_a_token() -> None:
    engine = FakeEngine()
    record = _send(engine, request=_request(output_len=4), endpoint="chat")
    assert record.ok, record.error
    assert engine.payloads[0]["messages"][0]["role"] == "user"
    assert record.output_tokens == 4
    assert len(record.itl) == 3


def test_http_error_becomes_failed_record_with_message() -> None:
    record = _send(FakeEngine(), model="http-500")
    assert not record.ok
    assert record.error == "HTTP 500: engine overloaded"
    assert record.status == 500 and not record.rejected


def test_a_503_is_a_failed_record_counted_as_rejected() -> None:
    record = _send(FakeEngine(), model="http-503")
    assert not record.ok and record.rejected and record.status == 503
    assert record.error == "HTTP 503: no instance can serve this request"
    assert _send(FakeEngine()).status == 200


def test_error_event_mid_stream_fails_the_request() -> None:
    record = _send(FakeEngine(), model="error-event")
    assert not record.ok
    assert record.error == "KV transfer failed"


def test_server_dropping_the_connection_fails_the_request() -> None:
    record = _send(FakeEngine(), model="cut")
    assert not record.ok
    assert record.error


def test_stream_without_done_fails_the_request() -> None:
    record = _send(FakeEngine(), model="no-done")
    assert not record.ok
    assert "[DONE]" in record.error


def test_stalled_stream_times_out_without_hanging() -> None:
    started = time.perf_counter()
    record = _send(FakeEngine(hang_seconds=5.0), model="hang", timeout=0.3)
    assert not record.ok
    assert record.error == "timed out after 0.3 s"
    assert time.perf_counter() - started < 4.0


def test_refused_connection_fails_the_request() -> None:
    async def go() -> RequestRecord:
        config = BenchConfig(base_url="http://127.0.0.1:9", timeout=2.0)
        async with open_session(config) as session:
            return await BenchClient(session, config, "ok").send(_request())

    record = asyncio.run(go())
    assert not record.ok
    assert "ClientConnectorError" in record.error


def test_model_defaults_to_the_first_one_the_server_lists() -> None:
    async def go() -> str:
        async with serving(FakeEngine(served_model="tiny")) as url:
            config = BenchConfig(base_url=url)
            async with open_session(config) as session:
                return await fetch_model(session, config)

    assert asyncio.run(go()) == "tiny"


def test_unreachable_server_raises_server_unreachable() -> None:
    async def go() -> str:
        config = BenchConfig(base_url="http://127.0.0.1:9", timeout=2.0)
        async with open_session(config) as session:
            return await fetch_model(session, config)

    with pytest.raises(ServerUnreachable, match="cannot reach"):
        asyncio.run(go())


def test_max_concurrency_caps_requests_in_flight() -> None:
    engine = FakeEngine(token_delay=0.01)

    async def go() -> list[RequestRecord]:
        async with serving(engine) as url:
            config = BenchConfig(base_url=url, max_concurrency=2)
            async with open_session(config) as session:
                client = BenchClient(session, config, "ok")
                return await asyncio.gather(*(client.send(_request(), i) for i in range(6)))

    records = asyncio.run(go())
    assert all(r.ok for r in records)
    spans = [(r.start, r.start + r.e2el) for r in records]
    most = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert most <= 2


def test_latency_ends_at_the_last_token_as_vllms_does() -> None:
    record = _send(FakeEngine(token_delay=0.005), request=_request(output_len=4))
    assert record.ok, record.error
    assert record.e2el == pytest.approx(record.ttft + sum(record.itl), abs=1e-9)


def test_a_prepared_body_is_sent_as_encoded() -> None:
    engine = FakeEngine()

    async def go() -> RequestRecord:
        async with serving(engine) as url:
            config = BenchConfig(base_url=url)
            async with open_session(config) as session:
                client = BenchClient(session, config, "ok")
                requests = [_request(output_len=2), _request(prompt_len=3, output_len=2)]
                client.prepare(requests, [1])
                return await client.send(requests[1], index=1)

    record = asyncio.run(go())
    assert record.ok and record.prompt_tokens == 3
    assert engine.payloads[0]["prompt"] == "baba babe babi"
    assert engine.payloads[0]["max_tokens"] == 2


def test_header_flags_go_with_every_request() -> None:
    engine = FakeEngine()
    record = _send(engine, headers=(("X-Pdctl-Canary", "tok"),))
    assert record.ok, record.error
    sent = engine.headers[0]
    assert sent["X-Pdctl-Canary"] == "tok" and sent["Content-Type"] == "application/json"
