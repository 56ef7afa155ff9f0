"""Hostile input to the proxy: bad bodies are 4xx naming the field, oversized ones 413, the
admin API refuses wrong tokens, and a flood of bogus ZMQ registrations is refused, counted and
leaves routing alone."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import msgpack
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.connector.fakes import (
    FakeEngine,
    completion,
    engines,
    refused_at,
    registry_dealer,
    run,
    running,
    settings_for,
)
from tests.connector.test_proxy import until


async def send(
    base: str,
    data: bytes | str,
    content_type: str | None = "application/json",
    path: str = "/v1/completions",
    headers: dict | None = None,
):
    hdrs = {"Content-Type": content_type} if content_type else {}
    async with (
        aiohttp.ClientSession() as s,
        s.post(base + path, data=data, headers={**hdrs, **(headers or {})}) as r,
    ):
        return r.status, await r.read()


def error_of(raw: bytes) -> dict:
    return json.loads(raw)["error"]


BAD_BODIES = [
    (b"{", "body", "not valid JSON"),
    (b"\xff\xfe\x00", "body", "not valid JSON"),
    (b"[1, 2]", "body", "JSON object"),
    (b"null", "body", "JSON object"),
    (b'{"prompt": "hi"}', "model", "'model' is required"),
    (b'{"model": 7, "prompt": "hi"}', "model", "'model' is required"),
    (b'{"model": "tiny"}', "prompt", "'prompt' is required"),
    (b'{"model": "tiny", "prompt": "hi", "max_tokens": -1}', "max_tokens", "positive"),
    (b'{"model": "tiny", "prompt": "hi", "max_tokens": "9"}', "max_tokens", "positive"),
    (b'{"model": "tiny", "prompt": "hi", "max_tokens": NaN}', "max_tokens", "positive"),
    (b'{"model": "tiny", "prompt": "hi", "stream": "yes"}', "stream", "true or false"),
    (b"[" * 100_000 + b"]" * 100_000, "body", "nested too deeply"),
]


def test_bad_bodies_are_400_naming_the_field_and_reach_no_engine():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            for raw, field, says in BAD_BODIES:
                status, answer = await send(base, raw)
                assert status == 400, (raw[:40], answer[:200])
                error = error_of(answer)
                assert error["param"] == field and says in error["message"], error
            status, answer = await send(base, b'{"model": "tiny"}', path="/v1/chat/completions")
            assert status == 400 and error_of(answer)["param"] == "messages"
            assert p.seen == [] and d.seen == []
            # and it still serves
            assert (await send(base, json.dumps(completion(3))))[0] == 200

    run(body())


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_json_body_under_another_content_type_is_served_like_vllm(content_type):
    # Clients that forget the header still get served; a non-JSON body is still a 400.
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            status, _ = await send(base, json.dumps(completion(2, stream=False)), content_type)
            assert status == 200
            status, answer = await send(base, "model=tiny&prompt=hi", content_type)
            assert status == 400 and error_of(answer)["param"] == "body"

    run(body())


def test_unicode_everywhere_is_passed_through():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            prompt = "héllo \u202e RTL \x00 NUL 🙂 " + "ü" * 1000
            status, _ = await send(base, json.dumps(completion(2, prompt=prompt)))
            assert status == 200
            assert d.seen[-1].body["prompt"] == prompt

    run(body())


def test_a_body_over_the_limit_is_413_saying_so():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d], max_body_bytes=4096)) as (base, proxy),
        ):
            big = json.dumps(completion(2, prompt="x" * 5000))
            status, answer = await send(base, big)
            assert status == 413
            error = error_of(answer)
            assert error["code"] == 413 and "larger than 4096 bytes" in error["message"]
            assert p.seen == []
            assert proxy.metrics.outcomes["invalid"] >= 1

            async def chunks():  # no Content-Length: the limit holds while streaming
                for _ in range(10):
                    yield b" " * 1000

            status, answer = await send(base, chunks())
            assert status == 413
            assert (await send(base, json.dumps(completion(2))))[0] == 200

    run(body())


def test_settings_refuse_silly_limits():
    assert refused_at(max_body_bytes=10) == "max_body_bytes"
    assert refused_at(registry_max_instances=0) == "registry_max_instances"


def test_admin_api_needs_its_token_and_inference_does_not():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d], admin_token="adm1n")) as (base, proxy),
        ):
            async with aiohttp.ClientSession() as s:
                for headers in (
                    {},
                    {"Authorization": "Bearer wrong"},
                    {"Authorization": "adm1n"},
                    {"Authorization": "Bearer adm1n2"},
                    {"Authorization": "Basic adm1n"},
                ):
                    for method, path in (
                        ("GET", "/admin/instances"),
                        ("POST", "/admin/instances/remove"),
                        ("POST", "/admin/groups/read/pause"),
                    ):
                        async with s.request(
                            method, base + path, headers=headers, json={"url": p.url}
                        ) as r:
                            assert r.status == 401, (headers, path)
                            assert "adm1n" not in await r.text()
            assert proxy.pool.get(p.url) is not None and not proxy.pool.any_paused()
            # the OpenAI routes are not behind the admin token
            assert (await send(base, json.dumps(completion(2))))[0] == 200
            status, _ = await send(
                base,
                b"[" * 100_000,
                path="/admin/instances",
                headers={"Authorization": "Bearer adm1n"},
            )
            assert status == 400

    run(body())


def rejected(text: str) -> dict[str, float]:
    return {
        s.labels["reason"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "pdctl_proxy_registry_rejected_total"
    }


BOGUS = [
    b"\xc1 not msgpack",
    msgpack.packb([1, 2, 3]),
    msgpack.packb({"type": "X"}),
    msgpack.packb({"type": "P"}),
    msgpack.packb({"type": "P", "http_address": ["127.0.0.1:1"]}),
    msgpack.packb({"type": "P", "http_address": "no-port"}),
    msgpack.packb({"type": "P", "http_address": "127.0.0.1:99999"}),
    msgpack.packb({"type": "P", "http_address": "ftp://127.0.0.1:1"}),
    msgpack.packb({"type": "D", "http_address": "127.0.0.1:1", "zmq_address": {"a": 1}}),
    msgpack.packb({"type": "D", "http_address": "127.0.0.1:1", "transfer_mode": "SIDEWAYS"}),
    msgpack.packb({"type": "register", "role": "Q", "request_address": "http://a:1"}),
    msgpack.packb({"type": "P", "http_address": "127.0.0.1:1", "tp_size": "many"}),
]


def test_a_flood_of_bogus_registrations_is_refused_counted_and_routing_is_unaffected():
    async def body():
        settings = settings_for(registry_port=0, connector="moriio", registry_max_instances=2)
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings) as (base, proxy),
        ):
            with registry_dealer(proxy.registry_port, sndhwm=100_000) as dealer:
                for fake, kind in ((p, "P"), (d, "D")):
                    dealer.send(
                        msgpack.packb({"type": kind, "http_address": fake.url[len("http://") :]})
                    )
                assert await until(lambda: len(list(proxy.pool)) == 2)
                # 2,000 made-up instances (valid messages, addresses outside --registry-allow)
                # and 1,200 malformed ones
                for i in range(2000):
                    dealer.send(
                        msgpack.packb(
                            {"type": "PD"[i % 2], "http_address": f"10.9.{i // 250}.{i % 250}:1"}
                        )
                    )
                    if i % 20 == 0:
                        dealer.send_multipart([BOGUS[(i // 20) % len(BOGUS)]])
                        await asyncio.sleep(0)
                for raw in BOGUS * 100:
                    dealer.send(raw)
                async with aiohttp.ClientSession() as s:
                    for _ in range(10):  # served throughout, by the two real instances
                        async with s.post(
                            base + "/v1/completions", json=completion(2, stream=False)
                        ) as r:
                            assert r.status == 200
                assert await until(
                    lambda: (
                        proxy.metrics.registry_rejected.get("sender") == 2000
                        and proxy.metrics.registry_rejected.get("malformed")
                        == 100 * len(BOGUS) + 100
                    ),
                    seconds=10,
                ), proxy.metrics.registry_rejected
                assert {i.url for i in proxy.pool} == {p.url, d.url}
                assert len(p.seen) == 10 and len(d.seen) == 10
                async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
                    counts = rejected(await r.text())
                assert counts == {"sender": 2000.0, "malformed": 100.0 * len(BOGUS) + 100}
                # the real ones keep beating: refreshed, never refused
                dealer.send(msgpack.packb({"type": "P", "http_address": p.url[7:]}))
                await asyncio.sleep(0.1)
                assert proxy.metrics.registry_rejected["sender"] == 2000

    run(body(), timeout=60)
