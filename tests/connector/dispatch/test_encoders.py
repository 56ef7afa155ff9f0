"""The encode tier through the proxy (connector/dispatch/encoders.py): each chat image goes alone
to an
encoder, round-robin, before the prefill; text-only requests and completions skip it; a failed
encoder is a 502 naming it and nothing reaches the prefill."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp

from connector.dispatch.encoders import EncoderRing, child_request_id, encoder_body, mm_items
from connector.pool.instances import InstancePool
from connector.pool.policy import RoundRobin
from connector.settings import FlagInstance
from tests.connector.fakes import FakeEngine, completion, engines, proxied, run
from tests.connector.test_proxy import until

IMG = {"type": "image_url", "image_url": {"url": "http://x.invalid/cat.png"}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}


def chat(*parts: dict, stream: bool = False) -> dict:
    content = [{"type": "text", "text": "what is in these"}, *parts]
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 3,
        "stream": stream,
    }


def test_items_are_every_multimodal_part_and_each_goes_alone_without_text():
    body = chat(IMG, AUDIO, {"type": "text", "text": "x"})
    assert mm_items(body) == [IMG, AUDIO]
    assert mm_items({"messages": "nope"}) == [] and mm_items(completion()) == []
    assert encoder_body(body, IMG) == {
        "model": "tiny",
        "messages": [{"role": "user", "content": [IMG]}],
        "max_tokens": 1,
        "stream": False,
    }
    parent, index, tail = child_request_id("abc", 2).split(":")
    assert (parent, index, len(tail)) == ("abc", "2", 6)


def test_the_ring_spreads_items_across_requests_over_available_encoders():
    pool = InstancePool(RoundRobin())
    e0, e1 = (pool.upsert(u, "encode", "read") for u in ("http://e0/", "http://e1"))
    pool.upsert("http://p", "prefill", "read")
    ring = EncoderRing(pool)
    assert ring.pick(3) == [e0, e1, e0]
    assert ring.pick(1) == [e1]
    pool.set_draining(e1.url, True)
    assert ring.pick(2) == [e0, e0]
    pool.set_draining(e0.url, True)
    assert ring.pick(1) == []
    # an encoder sits in a colocated group too (E + PD)
    assert pool.upsert("http://e2", "encode", "colocated").mode == "colocated"


async def _post(base: str, body: dict, path: str = "/v1/chat/completions"):
    async with aiohttp.ClientSession() as s, s.post(base + path, data=json.dumps(body)) as r:
        return r.status, await r.read()


def test_images_go_to_the_encoders_first_then_prefill_then_decode():
    async def body():
        e0, e1 = FakeEngine("e0"), FakeEngine("e1")
        prefill, decode = FakeEngine("p"), FakeEngine("d")
        async with engines(e0, e1):
            encode = (FlagInstance(e0.url), FlagInstance(e1.url))
            async with proxied([prefill], [decode], encode=encode) as (base, proxy):
                status, _ = await _post(base, chat(IMG, AUDIO, IMG, stream=True))
                assert status == 200
                assert [len(e0.seen), len(e1.seen)] == [2, 1]
                seen = [*e0.seen, *e1.seen]
                assert all(s.body["messages"][0]["content"][0]["type"] != "text" for s in seen)
                assert all(s.body["max_tokens"] == 1 and s.body["stream"] is False for s in seen)
                assert max(s.at for s in seen) <= prefill.seen[0].at <= decode.seen[0].at
                assert prefill.seen[0].body["messages"][0]["content"][1] == IMG  # the original
                # text-only chats and completions skip the encoders
                assert (await _post(base, chat()))[0] == 200
                assert (await _post(base, completion(stream=False), "/v1/completions"))[0] == 200
                assert len(e0.seen) + len(e1.seen) == 3
                assert proxy.encoders.items == 3 and proxy.encoders.failed == 0
                metrics = (await _get(base + "/metrics")).decode()
                assert 'pdctl_proxy_encode_items_total{outcome="ok"} 3.0' in metrics

    run(body())


async def _get(url: str) -> bytes:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return await r.read()


def test_the_encoders_time_is_in_the_ttft_the_client_sees():
    async def body():
        slow = FakeEngine("e", decode_first_delay=0.3)
        async with engines(slow):
            encode = (FlagInstance(slow.url),)
            async with proxied([FakeEngine("p")], [FakeEngine("d")], encode=encode) as (base, _):
                start = time.monotonic()
                status, _ = await _post(base, chat(IMG))
                assert status == 200 and time.monotonic() - start >= 0.3

    run(body())


def test_a_failed_encoder_is_a_502_naming_it_and_the_prefill_never_hears():
    async def body():
        broken = FakeEngine("e", decode_status=500)
        prefill = FakeEngine("p")
        async with engines(broken):
            encode = (FlagInstance(broken.url),)
            async with proxied([prefill], [FakeEngine("d")], encode=encode) as (base, proxy):
                status, raw = await _post(base, chat(IMG))
                error = json.loads(raw)["error"]
                assert status == 502 and error["leg"] == "encode"
                assert error["instance"] == broken.url and prefill.seen == []
                assert proxy.encoders.failed == 1

    run(body())


def test_with_every_encoder_drained_the_request_goes_on_and_the_prefill_encodes():
    async def body():
        enc, prefill = FakeEngine("e"), FakeEngine("p")
        async with engines(enc):
            encode = (FlagInstance(enc.url),)
            async with proxied([prefill], [FakeEngine("d")], encode=encode) as (base, proxy):
                proxy.pool.set_draining(enc.url, True)
                assert (await _post(base, chat(IMG, IMG)))[0] == 200
                assert enc.seen == [] and len(prefill.seen) == 1
                assert proxy.encoders.skipped == 2
                listed = [i for i in proxy.pool.describe()["instances"] if i["role"] == "encode"]
                assert [i["url"] for i in listed] == [enc.url]

    run(body())


def test_a_decode_drained_while_the_encoders_ran_is_not_used():
    """The request is counted on its route only once its legs start: a decode drained while
    the encoders ran (and stopped, since it looked idle) is routed around."""

    async def body():
        slow = FakeEngine("e", decode_first_delay=0.5)
        d1, d2 = FakeEngine("d1"), FakeEngine("d2")
        async with engines(slow):
            encode = (FlagInstance(slow.url),)
            async with proxied([FakeEngine("p")], [d1, d2], encode=encode) as (base, proxy):
                for drained, other in ((d1, d2), (d2, d1)):  # routed to either: both left
                    d1.seen.clear()
                    d2.seen.clear()
                    sent = asyncio.ensure_future(_post(base, chat(IMG)))
                    assert await until(lambda: len(slow.seen) > 0)
                    slow.seen.clear()
                    proxy.pool.set_draining(drained.url, True)
                    status, _ = await sent
                    assert status == 200 and drained.seen == [] and len(other.seen) == 1
                    proxy.pool.set_draining(drained.url, False)

    run(body())
