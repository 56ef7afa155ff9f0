"""The proxy against fake vLLM upstreams on loopback."""

import asyncio
import json

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from connector.settings import FlagInstance
from tests.connector.fakes import (
    FakeEngine,
    completion,
    engines,
    run,
    running,
    settings_for,
    sse_events,
)


async def post(base, body, path="/v1/completions", raw=None):
    async with aiohttp.ClientSession() as s:
        data = raw if raw is not None else json.dumps(body)
        async with s.post(base + path, data=data) as r:
            return r.status, dict(r.headers), await r.read()


async def until(predicate, seconds=3.0):
    """Poll a condition with a bound; returns its last value."""
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


def tokens(events):
    return [e for e in events if isinstance(e, dict) and e.get("choices")]


def test_read_mode_is_serial_and_decode_gets_the_prefill_params():
    async def body():
        async with (
            engines(FakeEngine("p", prefill_delay=0.1), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            status, _, raw = await post(base, completion(5))
        assert status == 200
        assert p.kinds() == ["prefill"] and d.kinds() == ["decode"]
        assert d.seen[0].at >= p.seen[0].at + 0.1  # sent only after the prefill answered
        assert d.seen[0].body["kv_transfer_params"] == p.params()
        assert d.seen[0].body["max_tokens"] == 5
        assert p.seen[0].body["max_tokens"] == 1 and p.seen[0].body["stream"] is False
        assert p.seen[0].headers["X-Request-Id"] == d.seen[0].headers["X-Request-Id"]
        events = sse_events(raw)
        assert len(tokens(events)) == 5 and events[-1] == "[DONE]"

    run(body())


def test_write_mode_sends_both_legs_at_once():
    async def body():
        p_zmq = "host:127.0.0.1,handshake:6301,notify:6105"
        d_zmq = "host:127.0.0.1,handshake:7301,notify:7501"
        async with engines(
            FakeEngine("p", prefill_delay=0.3), FakeEngine("d", decode_first_delay=0.3)
        ) as (p, d):
            settings = settings_for(
                connector="moriio",
                mode="write",
                prefill=[f"{p.url}#{p_zmq}"],  # as the flag gives it: URL#ZMQ address
                decode=[f"{d.url}#{d_zmq}"],
            )
            async with running(settings) as (base, _):
                status, _, raw = await post(base, completion(4))
        assert status == 200
        assert abs(d.seen[0].at - p.seen[0].at) < 0.2  # concurrent, not serial
        pb, db = p.seen[0].body, d.seen[0].body
        assert pb["kv_transfer_params"]["transfer_id"] == db["kv_transfer_params"]["transfer_id"]
        assert db["kv_transfer_params"]["do_remote_prefill"] is True
        rid = p.seen[0].headers["X-Request-Id"]
        assert rid == d.seen[0].headers["X-Request-Id"]
        assert rid.startswith(f"___prefill_addr_{p_zmq}___decode_addr_{d_zmq}_")
        assert len(tokens(sse_events(raw))) == 4

    run(body())


def test_colocated_balances_whole_requests():
    async def body():
        async with engines(FakeEngine("a"), FakeEngine("b")) as (a, b):
            settings = settings_for(
                mode="colocated", instance=(FlagInstance(a.url), FlagInstance(b.url))
            )
            async with running(settings) as (base, _):
                for _ in range(4):
                    status, _, raw = await post(base, completion(3))
                    assert status == 200 and len(tokens(sse_events(raw))) == 3
        assert a.kinds() == ["whole", "whole"] and b.kinds() == ["whole", "whole"]
        assert "kv_transfer_params" not in a.seen[0].body

    run(body())


def test_client_gets_exactly_the_tokens_it_asked_for():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, proxy),
        ):
            opts = {"stream_options": {"include_usage": True}}
            status, _, raw = await post(base, completion(7, **opts))
            events = sse_events(raw)
            assert status == 200
            assert len(tokens(events)) == 7
            assert events[-2]["usage"]["completion_tokens"] == 7
            status, _, raw = await post(base, completion(7, stream=False))
            answer = json.loads(raw)
            assert answer["usage"]["completion_tokens"] == 7
            assert answer["choices"][0]["text"].split() == [f"w{i}" for i in range(7)]
            chat = {
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "max_completion_tokens": 6,
                "stream": True,
            }
            status, _, raw = await post(base, chat, "/v1/chat/completions")
            assert status == 200 and len(tokens(sse_events(raw))) == 6
            assert p.seen[-1].body["max_completion_tokens"] == 1
            assert d.seen[-1].body["max_completion_tokens"] == 6
            log = list(proxy.requests)
            assert [e["output_tokens"] for e in log] == [7, 7, 6]

    run(body())


def test_no_instance_is_503():
    async def body():
        async with running(settings_for()) as (base, _):
            status, headers, raw = await post(base, completion())
        assert status == 503 and "Retry-After" in headers
        error = json.loads(raw)["error"]
        assert error["code"] == 503 and "no instance" in error["message"]

    run(body())


def test_prefill_error_is_502_naming_prefill_and_decode_is_never_called():
    async def body():
        async with (
            engines(FakeEngine("p", prefill_status=500), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, proxy),
        ):
            status, _, raw = await post(base, completion())
        assert status == 502
        error = json.loads(raw)["error"]
        assert error["leg"] == "prefill" and error["instance"] == p.url
        assert p.url in error["message"] and "prefill exploded" in error["message"]
        assert d.seen == []
        assert proxy.metrics.outcomes["failed"] == 1

    run(body())


def test_write_mode_prefill_error_cancels_the_decode_leg():
    async def body():
        prefill = FakeEngine("p", prefill_status=500, prefill_delay=0.2)
        decode = FakeEngine("d", decode_first_delay=5.0)
        async with engines(prefill, decode) as (p, d):
            settings = settings_for([p], [d], connector="moriio", mode="write")
            async with running(settings) as (base, _):
                status, _, raw = await post(base, completion())
                assert status == 502 and json.loads(raw)["error"]["leg"] == "prefill"
                assert await until(lambda: d.cancelled == ["decode"])

    run(body())


def test_prefill_timeout_is_502_naming_prefill():
    async def body():
        async with (
            engines(FakeEngine("p", prefill_delay=5.0), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d], prefill_timeout=0.2)) as (base, _),
        ):
            status, _, raw = await post(base, completion())
            assert await until(lambda: p.cancelled == ["prefill"])
        error = json.loads(raw)["error"]
        assert status == 502 and error["leg"] == "prefill" and "0.2 s" in error["message"]
        assert d.seen == []

    run(body())


def test_decode_dying_mid_stream_ends_with_an_error_event():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d", die_after=3)) as (p, d),
            running(settings_for([p], [d])) as (base, proxy),
        ):
            status, _, raw = await post(base, completion(8))
            events = sse_events(raw)
            assert status == 200
            assert len(tokens(events)) == 3
            assert events[-2]["error"]["leg"] == "decode"
            assert events[-2]["error"]["instance"] == d.url
            assert events[-1] == "[DONE]"
            assert proxy.requests[-1]["outcome"] == "failed"

    run(body())


def test_decode_going_silent_times_out_into_an_error_event():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d", hang_after=2)) as (p, d),
            running(settings_for([p], [d], decode_timeout=0.2)) as (base, _),
        ):
            status, _, raw = await post(base, completion(8))
        events = sse_events(raw)
        assert status == 200 and len(tokens(events)) == 2
        assert "no answer within 0.2 s" in events[-2]["error"]["message"]

    run(body())


def test_decode_error_status_before_streaming_is_502_naming_decode():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d", decode_status=500)) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            status, _, raw = await post(base, completion())
        error = json.loads(raw)["error"]
        assert status == 502 and error["leg"] == "decode" and "decode exploded" in error["message"]

    run(body())


def test_client_disconnect_during_prefill_cancels_it_and_no_decode_is_sent():
    async def body():
        async with (
            engines(FakeEngine("p", prefill_delay=5.0), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, proxy),
        ):
            task = asyncio.create_task(post(base, completion()))
            assert await until(lambda: p.seen)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert await until(lambda: p.cancelled == ["prefill"])
            assert await until(lambda: proxy.metrics.outcomes["cancelled"] == 1)
            assert d.seen == []

    run(body())


def test_client_disconnect_in_write_mode_cancels_both_legs():
    async def body():
        prefill = FakeEngine("p", prefill_delay=5.0)
        decode = FakeEngine("d", token_delay=0.05)
        async with engines(prefill, decode) as (p, d):
            settings = settings_for([p], [d], connector="moriio", mode="write")
            async with running(settings) as (base, _), aiohttp.ClientSession() as s:
                async with s.post(base + "/v1/completions", json=completion(200)) as r:
                    await r.content.readuntil(b"\n\n")  # one token arrived
                    r.close()
                assert await until(
                    lambda: sorted(p.cancelled + d.cancelled) == ["decode", "prefill"]
                )

    run(body())


def test_bad_client_input_is_400_naming_the_field():
    async def body():
        async with running(settings_for()) as (base, proxy):
            cases = [
                (b"{not json", "body"),
                (json.dumps({"prompt": "x"}).encode(), "model"),
                (json.dumps({"model": "m"}).encode(), "prompt"),
                (json.dumps({"model": "m", "prompt": "x", "max_tokens": 0}).encode(), "max_tokens"),
            ]
            for raw, field in cases:
                status, _, answer = await post(base, None, raw=raw)
                error = json.loads(answer)["error"]
                assert status == 400 and error["param"] == field and field in error["message"]
            status, _, answer = await post(base, {"model": "m"}, "/v1/chat/completions")
            assert status == 400 and json.loads(answer)["error"]["param"] == "messages"
            assert proxy.metrics.outcomes["invalid"] == 5

    run(body())


def test_paused_group_holds_requests_until_resumed():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, proxy),
        ):
            proxy.pool.set_paused("read", True)
            task = asyncio.create_task(post(base, completion(3)))
            assert await until(lambda: proxy.metrics.held == 1)
            assert p.seen == []
            proxy.pool.set_paused("read", False)
            status, _, raw = await task
            assert status == 200 and len(tokens(sse_events(raw))) == 3
            assert proxy.metrics.held == 0

    run(body())


def test_hold_queue_overflow_and_deadline_are_503_with_retry_after():
    async def body():
        async with engines(FakeEngine("p"), FakeEngine("d")) as (p, d):
            settings = settings_for([p], [d], hold_queue=1, hold_deadline=0.3)
            async with running(settings) as (base, proxy):
                proxy.pool.set_paused("read", True)
                held = asyncio.create_task(post(base, completion()))
                assert await until(lambda: proxy.metrics.held == 1)
                status, headers, raw = await post(base, completion())
                assert status == 503 and headers["Retry-After"] == "1"
                assert "hold queue is full" in json.loads(raw)["error"]["message"]
                status, headers, raw = await held
                assert status == 503 and "Retry-After" in headers
                assert "hold deadline" in json.loads(raw)["error"]["message"]
                assert proxy.metrics.outcomes["rejected"] == 2
                assert p.seen == []

    run(body())


def test_read_and_write_groups_serve_side_by_side_and_pausing_one_leaves_the_other():
    async def body():
        fakes = [FakeEngine(n) for n in ("pr", "dr", "pw", "dw")]
        async with engines(*fakes) as (pr, dr, pw, dw):
            settings = settings_for([pr], [dr], connector="moriio", mode="read")
            async with running(settings) as (base, proxy):
                proxy.pool.upsert(pw.url, "prefill", "write")
                proxy.pool.upsert(dw.url, "decode", "write")
                for _ in range(4):
                    status, _, raw = await post(base, completion(2))
                    assert status == 200 and len(tokens(sse_events(raw))) == 2
                assert len(pr.seen) == len(dr.seen) == len(pw.seen) == len(dw.seen) == 2
                # a write-group decode never carries read-mode block ids
                assert "remote_block_ids" not in dw.seen[0].body["kv_transfer_params"]
                assert dr.seen[0].body["kv_transfer_params"]["remote_block_ids"] == [[1, 2, 3]]
                proxy.pool.set_paused("read", True)
                for _ in range(2):
                    status, _, _ = await post(base, completion(2))
                    assert status == 200
                assert len(pr.seen) == 2 and len(pw.seen) == 4

    run(body())


def test_metrics_and_health_and_models():
    async def body():
        async with engines(FakeEngine("p"), FakeEngine("d", token_delay=0.005)) as (p, d):
            settings = settings_for(
                [p],
                [d],
                slo_ttft_ms=10_000,
                slo_itl_ms=0.001,
            )
            async with running(settings) as (base, _), aiohttp.ClientSession() as s:
                for _ in range(2):
                    await post(base, completion(4))
                async with s.get(base + "/metrics") as r:
                    text = await r.text()
                async with s.get(base + "/health") as r:
                    health = await r.json()
                async with s.get(base + "/v1/models") as r:
                    models = await r.json()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        ttft = families["pdctl_proxy_ttft_seconds"]
        count = next(x.value for x in ttft.samples if x.name.endswith("_count"))
        assert count == 2
        buckets = [x.labels["le"] for x in ttft.samples if x.name.endswith("_bucket")]
        assert buckets[0] == "0.001" and buckets[-2] == "2560.0" and buckets[-1] == "+Inf"
        itl = families["pdctl_proxy_itl_seconds"]
        assert next(x.value for x in itl.samples if x.name.endswith("_count")) == 6
        for name in ("tpot", "e2e", "prefill_leg", "transfer_first_decode"):
            assert f"pdctl_proxy_{name}_seconds" in families
        outcomes = {
            x.labels["outcome"]: x.value
            for x in families["pdctl_proxy_requests"].samples
            if x.name.endswith("_total")
        }
        assert outcomes["ok"] == 2 and outcomes["failed"] == 0 and outcomes["rejected"] == 0
        slo = {
            x.labels["target"]: x.value
            for x in families["pdctl_proxy_slo_met"].samples
            if x.name.endswith("_total")
        }
        assert slo == {"ttft": 2, "itl": 0, "tpot": 0, "all": 0}
        assert "pdctl_proxy_loop_lag_seconds" in families
        assert health["status"] == "ok" and health["routable"] is True
        assert models["data"][0]["id"] == "tiny"

    run(body())
