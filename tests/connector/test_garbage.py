"""An upstream that answers 200 with garbage, or stalls: the client gets an error naming the leg
and the instance that failed, never the garbage (and never a 200 whose body is garbage)."""

import json

import pytest

from connector.dispatch.flight import MAX_EVENT_BYTES, Flight
from tests.connector.fakes import FakeEngine, completion, engines, run, running, settings_for
from tests.connector.test_proxy import post, sse_events, tokens


def error_of(raw: bytes) -> dict:
    return json.loads(raw)["error"]


@pytest.mark.parametrize("stream", [True, False])
def test_garbage_from_the_prefill_is_502_naming_it(stream):
    async def body():
        async with (
            engines(FakeEngine("p", prefill_garbage=True), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            status, _, raw = await post(base, completion(4, stream=stream))
        error = error_of(raw)
        assert status == 502 and (error["leg"], error["instance"]) == ("prefill", p.url)
        assert "not a JSON object" in error["message"] and d.seen == []

    run(body())


def test_a_garbage_stream_from_the_start_is_502_not_200():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d", garbage_after=0)) as (p, d),
            running(settings_for([p], [d])) as (base, proxy),
        ):
            status, _, raw = await post(base, completion(4))
            assert proxy.requests[-1]["outcome"] == "failed"
        error = error_of(raw)
        assert status == 502 and (error["leg"], error["instance"]) == ("decode", d.url)
        assert "not JSON" in error["message"] and b"exploded" not in raw.split(b"not JSON")[0]

    run(body())


def test_garbage_mid_stream_becomes_an_error_event_and_is_not_passed_on():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d", garbage_after=2, token_delay=0.05)) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            status, _, raw = await post(base, completion(6))
        assert status == 200 and b"\x8f" not in raw
        events = sse_events(raw)
        assert len(tokens(events)) == 2 and events[-1] == "[DONE]"
        assert events[-2]["error"]["leg"] == "decode" and events[-2]["error"]["instance"] == d.url

    run(body())


def test_a_whole_answer_that_is_not_json_is_502_naming_the_decode():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d", garbage_after=0)) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            status, _, raw = await post(base, completion(4, stream=False))
        assert status == 502 and error_of(raw)["leg"] == "decode"

    run(body())


def test_a_stream_answered_as_html_is_502_naming_the_content_type():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d", stream_type="text/html")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            status, _, raw = await post(base, completion(4))
        error = error_of(raw)
        assert status == 502 and error["leg"] == "decode" and "text/html" in error["message"]

    run(body())


def test_the_scan_flags_non_json_events_and_runaway_events_only():
    flight = Flight(0.0, "/v1/completions")
    flight.scan(b'data: {"choices":[{"text":"a"}]}\n\n: keep-alive\n\ndata: [DONE]\n\n', 1.0)
    assert flight.malformed is None and len(flight.token_times) == 1
    flight.scan(b"data: <html>\n\n", 2.0)
    assert flight.malformed == b"data: <html>"
    runaway = Flight(0.0, "/v1/completions")
    runaway.scan(b"data: {" + b"x" * MAX_EVENT_BYTES, 1.0)
    assert runaway.malformed is not None


def test_write_mode_decode_starved_by_a_stalled_prefill_names_the_prefill():
    async def body():
        # the decode waits for KV the prefill never pushes: silent until the decode timeout
        prefill = FakeEngine("p", prefill_delay=5.0)
        decode = FakeEngine("d", decode_first_delay=5.0)
        async with engines(prefill, decode) as (p, d):
            settings = settings_for(
                [p], [d], connector="moriio", mode="write", decode_timeout=0.3, prefill_timeout=10
            )
            async with running(settings) as (base, _):
                status, _, raw = await post(base, completion())
        error = error_of(raw)
        assert status == 502 and (error["leg"], error["instance"]) == ("prefill", p.url)
        assert d.url in error["message"] and "waited for its KV" in error["message"]

    run(body())
