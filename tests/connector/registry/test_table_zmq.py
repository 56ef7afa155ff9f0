"""Registration over a real ZMQ DEALER, both message shapes, expiry and a mode move."""

import asyncio

import aiohttp
import msgpack

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

NEW = {
    "type": "P",
    "http_address": "127.0.0.1:20005",
    "zmq_address": "host:127.0.0.1,handshake:6301,notify:6105",
    "dp_size": 1,
    "tp_size": 1,
    "transfer_mode": "READ",
}
OLD = {
    "type": "register",
    "role": "D",
    "index": "0",
    "request_address": "http://127.0.0.1:40005/v1/completions",
    "handshake_port": 7301,
    "notify_port": 7501,
    "dp_size": 1,
    "tp_size": 1,
    "transfer_mode": "READ",
}


def test_registration_expiry_and_mode_move():
    async def body():
        # heartbeat intervals scaled down 50x: newer shape 60 ms, expiry after 180 ms
        settings = settings_for(registry_port=0, heartbeat_scale=0.02, connector="moriio")
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (pe, de),
            running(settings) as (_, proxy),
        ):
            new = {**NEW, "http_address": pe.url[7:]}
            old = {**OLD, "request_address": de.url + "/v1/completions"}
            with registry_dealer(proxy.registry_port) as dealer:
                dealer.send(msgpack.packb({"type": "HELLO"}))
                dealer.send(msgpack.packb(new))
                dealer.send(msgpack.packb(old))
                assert await until(lambda: len(list(proxy.pool)) == 2)
                p, d = proxy.pool.get(pe.url), proxy.pool.get(de.url)
                assert (p.role, p.mode, p.source, p.healthy) == (
                    "prefill",
                    "read",
                    "registry",
                    True,
                )
                assert d.zmq_address == "host:127.0.0.1,handshake:7301,notify:7501"

                # the prefill restarts in write mode: it moves group
                dealer.send(msgpack.packb({**new, "transfer_mode": "WRITE"}))
                assert await until(lambda: p.mode == "write")
                assert p.url in proxy.pool.groups["write"].instances
                assert p.url not in proxy.pool.groups["read"].instances
                # and straight back, within one heartbeat interval: flapping, refused
                dealer.send(msgpack.packb(new))
                assert await until(lambda: proxy.metrics.registry_rejected.get("flapping"))
                assert p.mode == "write"

                # keep the prefill beating, let the decode go silent: only it is dropped
                for _ in range(20):
                    dealer.send(msgpack.packb({**new, "transfer_mode": "WRITE"}))
                    await asyncio.sleep(0.02)
                    if proxy.pool.get(d.url) is None:
                        break
                assert proxy.pool.get(d.url) is None
                assert proxy.pool.get(p.url) is not None
                assert await until(lambda: proxy.pool.get(p.url) is None)

                dealer.send(b"\xc1 not msgpack")  # refused, and the listener survives
                dealer.send(msgpack.packb(new))
                assert await until(lambda: proxy.pool.get(p.url) is not None)

    run(body())


def test_a_registration_is_routed_to_only_once_its_health_answers():
    async def body():
        settings = settings_for(registry_port=0, connector="moriio")
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings) as (base, proxy),
        ):
            with registry_dealer(proxy.registry_port) as dealer:
                ghost = {**OLD, "request_address": "http://127.0.0.1:9/v1/completions"}
                dealer.send(msgpack.packb(ghost))  # a decode that does not answer
                dealer.send(msgpack.packb({**NEW, "http_address": p.url[7:]}))
                assert await until(lambda: len(list(proxy.pool)) == 1)
                await asyncio.sleep(0.8)  # the ghost's admission probes all fail
                assert proxy.pool.get("http://127.0.0.1:9") is None
                assert "http://127.0.0.1:9" not in proxy.membership.gate.pending
                assert proxy.pool.route() is None
                async with aiohttp.ClientSession() as s:
                    async with s.post(base + "/v1/completions", json=completion(2)) as r:
                        assert r.status == 503 and "no available decode" in await r.text()
                    dealer.send(msgpack.packb({**OLD, "request_address": d.url}))
                    assert await until(lambda: proxy.pool.route() is not None)
                    async with s.post(base + "/v1/completions", json=completion(2)) as r:
                        assert r.status == 200
                assert d.kinds() == ["decode"]

    run(body())


def test_a_just_started_proxy_holds_requests_until_the_first_registration_is_healthy():
    async def body():
        settings = settings_for(registry_port=0, connector="moriio", startup_grace=10.0)
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings) as (base, proxy),
        ):
            with registry_dealer(proxy.registry_port) as dealer:
                async with aiohttp.ClientSession() as s:
                    # sent before any instance is known, as after a proxy restart
                    early = asyncio.create_task(
                        s.post(base + "/v1/completions", json=completion(2))
                    )
                    assert await until(lambda: proxy.metrics.held == 1)
                    dealer.send(msgpack.packb({**NEW, "http_address": p.url[7:]}))
                    dealer.send(msgpack.packb({**OLD, "request_address": d.url}))
                    response = await asyncio.wait_for(early, 10)
                    assert response.status == 200, await response.text()
                    response.release()
                    assert proxy.metrics.held == 0

    run(body())


def test_past_the_startup_grace_an_empty_proxy_answers_503_at_once():
    async def body():
        settings = settings_for(registry_port=0, connector="moriio", startup_grace=0.3)
        async with running(settings) as (base, _), aiohttp.ClientSession() as s:
            started = asyncio.get_running_loop().time()
            async with s.post(base + "/v1/completions", json=completion(2)) as r:
                assert r.status == 503
                assert "no instances are registered" in await r.text()
            waited = asyncio.get_running_loop().time() - started
            assert waited < 1.0  # the grace, not the 30 s hold deadline
            async with s.post(base + "/v1/completions", json=completion(2)) as r:
                assert r.status == 503

    run(body())


def test_a_negative_startup_grace_is_refused():
    assert refused_at(startup_grace=-1) == "startup_grace"


def test_an_exception_in_the_handler_leaves_the_loop_serving():
    async def body():
        settings = settings_for(registry_port=0, connector="moriio")
        async with engines(FakeEngine("p")) as (p,), running(settings) as (_, proxy):
            real = proxy.membership.on_registration
            calls = []

            def flaky(reg, peer):
                calls.append(reg.url)
                if len(calls) == 1:
                    raise RuntimeError("a bug in a handler")
                real(reg, peer)

            proxy.membership.listener.on_registration = flaky
            with registry_dealer(proxy.registry_port) as dealer:
                dealer.send(msgpack.packb({**NEW, "http_address": p.url[7:]}))
                assert await until(lambda: proxy.metrics.registry_rejected.get("error") == 1)
                dealer.send(msgpack.packb({**NEW, "http_address": p.url[7:]}))
                assert await until(lambda: proxy.pool.get(p.url) is not None)
            assert len(calls) == 2

    run(body())
