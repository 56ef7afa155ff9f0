"""Retries through the proxy on loopback fakes: only before the first byte reached the client,
on other instances, within the budget; the client gets exactly the tokens it asked for."""

import asyncio
import json
import socket
import time

from tests.connector.fakes import FakeEngine, completion, proxied, run, settings_for, sse_events
from tests.connector.test_proxy import post, until


def _tokens(raw: bytes) -> list[str]:
    return [
        e["choices"][0]["text"] for e in sse_events(raw) if isinstance(e, dict) and e["choices"]
    ]


def _dead_url() -> str:
    """A loopback URL whose port refuses connections."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _metric(proxy, leg: str, cause: str) -> int:
    return proxy.metrics.retries.get((leg, cause), 0)


def test_a_failed_prefill_is_retried_on_the_other_prefill_and_logged():
    async def body():
        p1, p2, d = FakeEngine("p1", prefill_status=500), FakeEngine("p2"), FakeEngine("d")
        async with proxied([p1, p2], [d]) as (base, proxy):
            status, _, raw = await post(base, completion(5))
            assert status == 200
            assert _tokens(raw) == [f" w{i}" for i in range(5)]  # exactly what it asked, once
            assert p1.kinds() == ["prefill"] and p2.kinds() == ["prefill"]
            assert d.kinds() == ["decode"]
            assert _metric(proxy, "prefill", "status") == 1
            entry = proxy.requests[-1]
            assert entry["outcome"] == "ok" and entry["retries"] == 1
            assert entry["attempts"][0]["instance"] == p1.url
            assert entry["prefill"] == p2.url
            assert entry["ttft_ms"] > 0 and entry["prefill_ms"] is not None
            text = (await _metrics_text(base)).decode()
            assert 'pdctl_proxy_retries_total{cause="status",leg="prefill"} 1.0' in text

    run(body())


async def _metrics_text(base: str) -> bytes:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
        return await r.read()


def test_a_refused_nixl_decode_is_retried_with_the_same_kv_transfer_params():
    async def body():
        p, d2, dead = FakeEngine("p"), FakeEngine("d2"), FakeEngine("d1", url=_dead_url())
        async with proxied([p], [dead, d2]) as (base, proxy):
            status, _, raw = await post(base, completion(4))
            assert status == 200 and len(_tokens(raw)) == 4
            assert p.kinds() == ["prefill"]  # nothing was pulled: no second prefill
            assert d2.seen[0].body["kv_transfer_params"] == p.params()
            assert _metric(proxy, "decode", "refused") == 1
            assert not proxy.pool.get(dead.url).available  # refused: out at once

    run(body())


def test_a_refused_moriio_decode_gets_a_fresh_prefill_and_transfer_id():
    async def body():
        p, d2, dead = FakeEngine("p"), FakeEngine("d2"), FakeEngine("d1", url=_dead_url())
        async with proxied([p], [dead, d2], connector="moriio") as (base, _):
            status, _, raw = await post(base, completion(4))
            assert status == 200 and len(_tokens(raw)) == 4
            ids = [s.body["kv_transfer_params"]["transfer_id"] for s in p.seen]
            assert len(ids) == 2 and ids[0] != ids[1]
            assert d2.seen[0].body["kv_transfer_params"]["transfer_id"] == ids[1]

    run(body())


def test_a_decode_failing_before_its_first_byte_is_retried_with_a_fresh_prefill():
    async def body():
        p, d1, d2 = FakeEngine("p"), FakeEngine("d1", decode_status=500), FakeEngine("d2")
        async with proxied([p], [d1, d2]) as (base, proxy):
            status, _, raw = await post(base, completion(6))
            assert status == 200
            assert _tokens(raw) == [f" w{i}" for i in range(6)]
            assert p.kinds() == ["prefill", "prefill"]
            assert d1.kinds() == ["decode"] and d2.kinds() == ["decode"]
            assert _metric(proxy, "decode", "status") == 1
            # each attempt's load ended on its own instances; the failure counted on d1 only
            for fake in (p, d1, d2):
                inst = proxy.pool.get(fake.url)
                assert (inst.outstanding_requests, inst.outstanding_tokens) == (0, 0)
            counts = {f.name: proxy.pool.get(f.url).failed for f in (p, d1, d2)}
            assert counts == {"p": 0, "d1": 1, "d2": 0}

    run(body())


def test_write_mode_retries_the_pair():
    async def body():
        p1, p2 = FakeEngine("p1", prefill_status=500), FakeEngine("p2")
        d1, d2 = FakeEngine("d1"), FakeEngine("d2")
        async with proxied([p1, p2], [d1, d2], connector="moriio", mode="write") as (base, proxy):
            status, _, raw = await post(base, completion(3))
            assert status == 200 and len(_tokens(raw)) == 3
            assert p2.kinds() == ["prefill"] and d2.kinds() == ["decode"]
            assert _metric(proxy, "prefill", "status") == 1

    run(body())


def test_no_retry_after_the_first_byte_reached_the_client():
    async def body():
        p, d1, d2 = FakeEngine("p"), FakeEngine("d1", die_after=2), FakeEngine("d2")
        async with proxied([p], [d1, d2]) as (base, proxy):
            status, _, raw = await post(base, completion(6))
            assert status == 200
            events = sse_events(raw)
            assert "decode leg to " + d1.url in events[-2]["error"]["message"]
            assert d2.seen == [] and proxy.metrics.retries == {}

    run(body())


def test_no_retry_when_the_budget_allows_one_attempt():
    async def body():
        p, d1, d2 = FakeEngine("p"), FakeEngine("d1", decode_status=500), FakeEngine("d2")
        async with proxied([p], [d1, d2], retry_attempts=1) as (base, proxy):
            status, _, raw = await post(base, completion(3))
            assert status == 502 and b"decode leg to " + d1.url.encode() in raw
            assert d2.seen == []
            assert proxy.metrics.retries_refused == {"attempts": 1}
            assert b"not retried after 1 attempt: the request's attempts are spent" in raw
            assert "attempts are spent" in proxy.requests[-1]["error"]

    run(body())


def test_a_failure_with_no_spare_says_which_role_had_none():
    async def body():
        # one prefill that fails: no other to retry on; one decode that fails: none left
        p_bad, d = FakeEngine("p", prefill_status=500), FakeEngine("d")
        async with proxied([p_bad], [d]) as (base, proxy):
            status, _, raw = await post(base, completion(3))
            assert status == 502 and b"no other prefill is available" in raw
            assert proxy.metrics.retries_refused == {"no_prefill": 1}
        p, d_bad = FakeEngine("p"), FakeEngine("d", decode_status=500)
        async with proxied([p], [d_bad]) as (base, proxy):
            status, _, raw = await post(base, completion(3))
            assert status == 502 and b"no decode is available" in raw
            assert proxy.metrics.retries_refused == {"no_decode": 1}
            text = (await _metrics_text(base)).decode()
            assert 'pdctl_proxy_retries_refused_total{reason="no_decode"} 1.0' in text

    run(body())


def test_a_retry_storm_is_bounded_when_every_instance_fails():
    async def body():
        fakes = [FakeEngine("p1"), FakeEngine("p2")] + [
            FakeEngine(f"d{i}", decode_status=500) for i in range(3)
        ]
        retry = {
            "retry_attempts": 3,
            "retry_budget_ratio": 0.1,
            "retry_min_per_s": 0.0,
            "retry_burst": 2.0,
            "retry_backoff": 0.0,
        }
        async with proxied(fakes[:2], fakes[2:], **retry, eject_after=0) as (base, proxy):
            answers = await asyncio.gather(*(post(base, completion(2)) for _ in range(20)))
            assert all(status == 502 for status, _, _ in answers)
            decode_legs = sum(len(d.seen) for d in fakes[2:])
            # 20 first attempts; retries within the burst (2) and a tenth of 20 requests
            assert decode_legs <= 20 + 2 + 2
            assert proxy.metrics.retries_refused.get("budget", 0) > 0

    run(body())


def test_a_hung_decode_is_left_at_its_first_byte_deadline_and_ejected_within_it():
    async def body():
        p, d1, d2 = FakeEngine("p"), FakeEngine("d1", decode_first_delay=10), FakeEngine("d2")
        async with proxied([p], [d1, d2], first_byte_timeout=0.4) as (base, proxy):
            started = time.monotonic()
            status, _, raw = await post(base, completion(3))
            took = time.monotonic() - started
            assert status == 200 and len(_tokens(raw)) == 3
            assert took < 2.0
            assert not proxy.pool.get(d1.url).available
            assert _metric(proxy, "decode", "first_byte") == 1
            assert proxy.metrics.ejections == {"first_byte": 1}
            assert await until(lambda: "decode" in d1.cancelled)  # aborted on d1

    run(body())


def test_a_busy_but_live_decode_is_not_ejected_for_a_slow_first_byte():
    async def body():
        # d1 streams request A slowly (1.5 s) while request B waits 0.8 s for its first
        # byte, past the 0.4 s deadline: d1 is busy, not hung.
        d1 = FakeEngine("d1", first_delays=[0.0, 0.8], token_delay=0.05)
        p, _, d2 = FakeEngine("p"), d1, FakeEngine("d2")
        async with proxied([p], [d1, d2], first_byte_timeout=0.4) as (base, proxy):
            a = asyncio.create_task(post(base, completion(30)))
            await asyncio.sleep(0.2)
            x = await post(base, completion(2))  # round robin: d2
            b = asyncio.create_task(post(base, completion(3)))  # d1 again
            (sa, _, ra), (sb, _, rb) = await asyncio.gather(a, b)
            assert (sa, sb, x[0]) == (200, 200, 200)
            assert len(_tokens(ra)) == 30 and len(_tokens(rb)) == 3
            assert proxy.pool.get(d1.url).available
            assert proxy.metrics.retries == {} and proxy.metrics.ejections == {}
            assert len(d1.seen) == 2

    run(body())


def test_a_lone_answer_not_streamed_is_given_its_generation_not_taken_for_a_hang():
    """Issue 39's class, a busy engine taken for a dead one: a leg that is not streamed has
    no byte before its whole answer. 15 tokens at 0.1 s take 1.5 s, past the 0.4 s deadline,
    on an engine with no other leg: it was ejected and the request retried until its
    attempts were spent. Its answer's bound at the floor speed is its grace."""

    async def body():
        p = FakeEngine("p")
        d1, d2 = FakeEngine("d1", token_delay=0.1), FakeEngine("d2", token_delay=0.1)
        async with proxied([p], [d1, d2], first_byte_timeout=0.4) as (base, proxy):
            status, _, raw = await post(base, completion(15, stream=False))
            assert status == 200
            assert json.loads(raw)["usage"]["completion_tokens"] == 15
            assert proxy.metrics.retries == {} and proxy.metrics.ejections == {}
            assert len(d1.seen) + len(d2.seen) == 1

    run(body())


def test_a_hung_decode_is_still_caught_for_an_answer_not_streamed():
    async def body():
        p, d1, d2 = FakeEngine("p"), FakeEngine("d1", decode_first_delay=10), FakeEngine("d2")
        async with proxied([p], [d1, d2], first_byte_timeout=0.4) as (base, proxy):
            started = time.monotonic()
            status, _, raw = await post(base, completion(3, stream=False))
            assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] == 3
            assert time.monotonic() - started < 3.0  # 0.4 s plus 3 tokens' 0.3 s, and the retry
            assert proxy.metrics.ejections == {"first_byte": 1}
            assert not proxy.pool.get(d1.url).available

    run(body())


def test_without_a_spare_a_slow_first_byte_waits_for_the_leg_timeout():
    async def body():
        p, d = FakeEngine("p"), FakeEngine("d", decode_first_delay=0.8)
        async with proxied([p], [d], first_byte_timeout=0.3) as (base, proxy):
            status, _, raw = await post(base, completion(2))
            assert status == 200 and len(_tokens(raw)) == 2
            assert proxy.pool.get(d.url).available and proxy.metrics.retries == {}

    run(body())


def test_the_first_byte_deadline_is_on_by_default():
    """Issue 39: a hang is caught without tuning; 0 turns it off."""
    assert settings_for().first_byte_timeout == 10.0
    assert settings_for(first_byte_timeout=0).first_byte_timeout == 0


def test_a_hung_prefill_is_left_at_its_first_byte_deadline_and_ejected_within_it():
    """Issue 39: a stopped prefill was not watched at all; its legs piled up until the
    supervisor killed it."""

    async def body():
        p1, p2, d = FakeEngine("p1", prefill_delay=10), FakeEngine("p2"), FakeEngine("d")
        async with proxied([p1, p2], [d], first_byte_timeout=0.4) as (base, proxy):
            started = time.monotonic()
            status, _, raw = await post(base, completion(3))
            took = time.monotonic() - started
            assert status == 200 and len(_tokens(raw)) == 3
            assert took < 2.0
            assert not proxy.pool.get(p1.url).available
            assert _metric(proxy, "prefill", "first_byte") == 1
            assert proxy.metrics.ejections == {"first_byte": 1}
            entry = proxy.requests[-1]
            assert (entry["attempts"][0]["prefill"], entry["prefill"]) == (p1.url, p2.url)
            assert await until(lambda: "prefill" in p1.cancelled)  # aborted on p1

    run(body())


def test_a_busy_prefill_answering_others_is_not_ejected_for_one_slow_answer():
    async def body():
        # p1 takes 1.2 s on request A, past the 0.4 s deadline, while it answers B, C, ...
        # at once: busy, not hung.
        p1 = FakeEngine("p1", prefill_delays=[1.2])
        p2, d = FakeEngine("p2"), FakeEngine("d")
        async with proxied([p1, p2], [d], first_byte_timeout=0.4) as (base, proxy):
            a = asyncio.create_task(post(base, completion(2)))
            others = []
            for _ in range(12):  # round robin: every other one on p1, answered at once
                await asyncio.sleep(0.1)
                others.append(await post(base, completion(2)))
            sa, _, _ = await a
            assert sa == 200 and {s for s, _, _ in others} == {200}
            assert proxy.pool.get(p1.url).available
            assert proxy.metrics.retries == {} and proxy.metrics.ejections == {}

    run(body())


def test_a_lone_long_prefill_is_given_time_by_its_prompt_not_taken_for_a_hang():
    """Issue 39's doubt: an idle engine prefilling one long prompt answers nothing past the
    first-byte deadline. ~1,500 tokens earn 1.5 s more at 1,000 tokens/s; the 1.2 s prefill
    ends within it, on the instance it was sent to, with no retry and no ejection."""

    async def body():
        p1 = FakeEngine("p1", prefill_delays=[1.2])
        p2, d = FakeEngine("p2"), FakeEngine("d")
        async with proxied([p1, p2], [d], first_byte_timeout=0.4) as (base, proxy):
            status, _, raw = await post(base, completion(3, prompt="word " * 1200))
            assert status == 200 and len(_tokens(raw)) == 3
            assert proxy.pool.get(p1.url).available
            assert proxy.metrics.retries == {} and proxy.metrics.ejections == {}
            assert proxy.requests[-1]["prefill"] == p1.url

    run(body())


def test_a_first_byte_silence_with_no_other_decode_is_retried_on_it_with_another_prefill():
    """A decode holding a restarted prefill's stale agent hangs on that pair alone: when the
    other decode leaves as the retry is planned (drained for its own restart), the same
    decode with another prefill serves."""

    async def body():
        p1, p2, d2 = FakeEngine("p1"), FakeEngine("p2"), FakeEngine("d2")
        d1 = FakeEngine("d1", first_delays=[10.0, 0.0])
        async with proxied([p1, p2], [d1, d2], first_byte_timeout=0.4) as (base, proxy):
            pick = proxy.pool.pick_other

            def d2_leaves(mode, role, tried):
                if role == "decode":
                    proxy.pool.set_draining(d2.url, True)
                return pick(mode, role, tried)

            proxy.pool.pick_other = d2_leaves
            status, _, raw = await post(base, completion(3))
            assert status == 200 and len(_tokens(raw)) == 3
            assert _metric(proxy, "decode", "first_byte") == 1
            entry = proxy.requests[-1]
            assert entry["attempts"][0]["decode"] == d1.url and entry["decode"] == d1.url
            assert (entry["attempts"][0]["prefill"], entry["prefill"]) == (p1.url, p2.url)
            assert d2.seen == []

    run(body())


def test_an_error_before_any_token_with_no_other_decode_is_retried_on_it_with_another_prefill():
    """A KV load that failed through a restarted prefill's stale agent is the pair's: with the
    other decode gone (restarting), the same decode with the other prefill serves (issue 39's
    SIGSTOPped prefill row lost one request so)."""

    async def body():
        p1, p2 = FakeEngine("p1"), FakeEngine("p2")
        d1, d2 = FakeEngine("d1", decode_statuses=[500]), FakeEngine("d2")
        async with proxied([p1, p2], [d1, d2]) as (base, proxy):
            proxy.pool.set_draining(d2.url, True)  # restarting
            # d1 ejected for its failures through the stale agent: still routed (the last)
            proxy.pool.get(d1.url).ejected_until = time.monotonic() + 60
            status, _, raw = await post(base, completion(3))
            assert status == 200 and len(_tokens(raw)) == 3
            entry = proxy.requests[-1]
            assert entry["attempts"][0]["decode"] == d1.url and entry["decode"] == d1.url
            assert (entry["attempts"][0]["prefill"], entry["prefill"]) == (p1.url, p2.url)

    run(body())


def test_a_retry_is_counted_on_its_next_decode_through_its_backoff():
    """A drain waits for what the proxy counts on the instance: a request waiting out a
    retry's backoff is on its next decode's count, not on none (uncounted, a roll took its
    decode for idle and stopped it under the retry)."""

    async def body():
        p, d1, d2 = FakeEngine("p"), FakeEngine("d1", decode_status=500), FakeEngine("d2")
        async with proxied([p], [d1, d2], retry_backoff=0.6) as (base, proxy):
            sent = asyncio.ensure_future(post(base, completion(2)))
            assert await until(lambda: proxy.metrics.retries.get(("decode", "status")) == 1)
            assert not sent.done()  # in its backoff
            counts = {f.name: proxy.pool.get(f.url).outstanding_requests for f in (p, d1, d2)}
            assert counts == {"p": 1, "d1": 0, "d2": 1}
            proxy.pool.set_draining(d2.url, True)  # a drain now waits for it
            status, _, raw = await sent
            assert status == 200 and len(_tokens(raw)) == 2
            assert d2.kinds() == ["decode"]
            for fake in (p, d1, d2):
                inst = proxy.pool.get(fake.url)
                assert (inst.outstanding_requests, inst.outstanding_tokens) == (0, 0)

    run(body())


def test_a_client_gone_in_a_retry_backoff_leaves_no_count_behind():
    async def body():
        p, d1, d2 = FakeEngine("p"), FakeEngine("d1", decode_status=500), FakeEngine("d2")
        async with proxied([p], [d1, d2], retry_backoff=2.0) as (base, proxy):
            sent = asyncio.ensure_future(post(base, completion(2)))
            assert await until(lambda: proxy.metrics.retries.get(("decode", "status")) == 1)
            sent.cancel()  # the client hangs up while the retry waits
            await asyncio.gather(sent, return_exceptions=True)
            assert await until(lambda: proxy.pool.get(d2.url).outstanding_requests == 0)
            for fake in (p, d1, d2):
                inst = proxy.pool.get(fake.url)
                assert (inst.outstanding_requests, inst.outstanding_tokens) == (0, 0)
            assert d2.seen == [] and proxy.pool.get(d2.url).failed == 0

    run(body())


async def _stop_the_prefill_that_answered(prefills: list[FakeEngine]) -> FakeEngine:
    """Stop whichever prefill answered first, as a SIGKILL after its answer would: its port
    then refuses connections, and the KV it held is gone."""
    assert await until(lambda: any(p.seen for p in prefills))
    dead = next(p for p in prefills if p.seen)
    await dead.stop()
    return dead


def test_a_decode_leg_whose_prefill_died_before_the_pull_is_retried_on_another_prefill():
    """vLLM's NIXL keeps a pull from a dead prefill in progress for ever, so the decode leg
    waited out the decode timeout (120 s; the real-vLLM prefill restart's client gave up
    first). Once its prefill refuses a connection and the leg is past its first-byte
    deadline, the KV is gone: the request goes to another prefill, on the same decode (not
    at fault: no other decode is needed, and it is not ejected)."""

    async def body():
        p1, p2 = FakeEngine("p1"), FakeEngine("p2")
        d = FakeEngine("d", first_delays=[10.0, 0.0])  # the pull from the dead prefill hangs
        settings = {"first_byte_timeout": 0.4, "health_interval": 0.2}
        async with proxied([p1, p2], [d], **settings) as (base, proxy):
            started = time.monotonic()
            sent = asyncio.create_task(post(base, completion(3)))
            dead = await _stop_the_prefill_that_answered([p1, p2])
            status, _, raw = await sent
            assert status == 200 and len(_tokens(raw)) == 3
            assert time.monotonic() - started < 3.0
            entry = proxy.requests[-1]
            lost = entry["attempts"][0]
            assert (lost["leg"], lost["cause"], lost["instance"]) == (
                "prefill",
                "kv_lost",
                dead.url,
            )
            assert entry["prefill"] != dead.url and entry["decode"] == d.url
            assert proxy.pool.get(d.url).available and proxy.metrics.ejections == {}
            assert await until(lambda: "decode" in d.cancelled)  # the stuck pull, aborted

    run(body())


def test_with_no_other_prefill_the_lost_kv_is_a_502_naming_the_prefill_not_a_long_wait():
    async def body():
        p, d = FakeEngine("p"), FakeEngine("d", decode_first_delay=10.0)
        settings = {"first_byte_timeout": 0.4, "health_interval": 0.2}
        async with proxied([p], [d], **settings) as (base, proxy):
            started = time.monotonic()
            sent = asyncio.create_task(post(base, completion(3)))
            await _stop_the_prefill_that_answered([p])
            status, _, raw = await sent
            assert time.monotonic() - started < 3.0  # not the decode timeout's 120 s
            error = json.loads(raw)["error"]
            assert status == 502 and error["leg"] == "prefill" and error["instance"] == p.url
            assert "the KV it held for this request is gone" in error["message"]
            assert proxy.pool.get(d.url).available

    run(body())


def test_a_prefill_dying_after_its_kv_was_pulled_costs_the_request_nothing():
    """Streamed, the decode's first token says the pull is done; not streamed, its answer
    is given the time its tokens take (0.8 s here, past the 0.4 s deadline): neither is cut
    when the prefill dies meanwhile."""

    async def one(stream: bool) -> None:
        p, d = FakeEngine("p"), FakeEngine("d", token_delay=0.1)
        settings = {"first_byte_timeout": 0.4, "health_interval": 0.2}
        async with proxied([p], [d], **settings) as (base, proxy):
            sent = asyncio.create_task(post(base, completion(8, stream=stream)))
            source = proxy.pool.get((await _stop_the_prefill_that_answered([p])).url)
            assert await until(lambda: source.refused_at > 0)
            status, _, raw = await sent
            assert status == 200, raw
            assert proxy.metrics.retries == {} and d.cancelled == []

    run(one(True))
    run(one(False))
