"""Following discovered groups against real HTTP sources on loopback: instances that appear
and go are events; a slow, dripping, huge, malformed, deeply nested or redirecting source
fails within its bounds, keeps the last set found, is told once, and never holds up a tick."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from observe.discovery.follower import Discoverer

pytestmark = pytest.mark.anyio

A, B, C = "http://127.0.0.1:8100", "http://127.0.0.1:8101", "http://127.0.0.1:8102"
TIMEOUT_S = 0.4
MAX_BYTES = 64 << 10


def targets(*urls: str, role: str = "prefill") -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "activeTargets": [
                {"labels": {"llm_d_ai_role": role}, "scrapeUrl": u + "/metrics"} for u in urls
            ]
        },
    }


class Source:
    """A Prometheus-like server whose /api/v1/targets answers whatever `handler` is now."""

    def __init__(self) -> None:
        self.handler: Callable[[web.Request], Awaitable[web.StreamResponse]] = self.answer
        self.doc: Any = targets(A, B)
        self.url = ""

    async def answer(self, _: web.Request) -> web.StreamResponse:
        return web.json_response(self.doc)

    async def route(self, request: web.Request) -> web.StreamResponse:
        return await self.handler(request)


@pytest.fixture
async def source() -> AsyncIterator[Source]:
    src = Source()
    app = web.Application()
    app.router.add_get("/api/v1/targets", src.route)
    app.router.add_get("/workers", src.route)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    src.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield src
    await runner.cleanup()


def spec(url: str, *, router: bool = False) -> Any:
    found = (
        {"router": url, "match": {}, "prometheus": None, "every_s": 1.0}
        if router
        else {"prometheus": url, "match": {"llm-d.ai/role": "prefill"}, "router": None}
    )
    found.setdefault("every_s", 1.0)
    discover = SimpleNamespace(model_dump=lambda mode: dict(found))
    group = SimpleNamespace(
        name="prefill", role=SimpleNamespace(value="prefill"), discover=discover
    )
    return SimpleNamespace(groups=[group])


async def look(d: Discoverer, s: Any, session: aiohttp.ClientSession, now: float) -> None:
    """One tick at `now`, then wait for the look it started (as later ticks would)."""
    d.tick("ext", s, now, session)
    tasks = [f.task for f in d._groups.values() if f.task is not None]
    await asyncio.gather(*tasks)


def kinds(d: Discoverer) -> list[str]:
    out = [c.kind for _, c in d.events]
    d.events.clear()
    return out


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_instances_that_appear_and_go_are_followed(source, session):
    d = Discoverer(timeout=TIMEOUT_S)
    s = spec(source.url)
    await look(d, s, session, 0.0)
    assert d.found("ext") == {"prefill": {"prefill-0": A, "prefill-1": B}}
    assert kinds(d) == ["attached.instance_appeared"] * 2
    source.doc = targets(B, C)
    d.tick("ext", s, 0.5, session)  # not due yet: nothing asked
    assert all(f.task is None for f in d._groups.values())
    await look(d, s, session, 1.0)
    assert d.found("ext") == {"prefill": {"prefill-0": C, "prefill-1": B}}
    assert kinds(d) == ["attached.instance_appeared", "attached.instance_gone"]
    shown = d.section("ext")
    assert shown is not None and shown[0]["found"] == {"prefill-0": C, "prefill-1": B}
    assert shown[0]["source"] == "prometheus" and shown[0]["error"] is None


async def test_a_router_source_gives_its_workers_of_the_role(source, session):
    source.doc = {
        "workers": [{"url": A, "worker_type": "prefill"}, {"url": B, "worker_type": "decode"}]
    }
    d = Discoverer(timeout=TIMEOUT_S)
    await look(d, spec(source.url, router=True), session, 0.0)
    assert d.found("ext") == {"prefill": {"prefill-0": A}}


async def test_an_address_outside_the_allowed_hosts_is_skipped_and_told(source, session):
    source.doc = targets(A, "http://10.9.9.9:8000")
    d = Discoverer(timeout=TIMEOUT_S)
    await look(d, spec(source.url), session, 0.0)
    assert d.found("ext") == {"prefill": {"prefill-0": A}}
    said = [c for _, c in d.events if c.kind == "attached.discovery_skipped"]
    assert len(said) == 1 and "http://10.9.9.9:8000" in said[0].message
    allowed = Discoverer(["10.0.0.0/8"], timeout=TIMEOUT_S)
    await look(allowed, spec(source.url), session, 0.0)
    assert len(allowed.found("ext")["prefill"]) == 2


async def slow(_: web.Request) -> web.StreamResponse:
    await asyncio.sleep(5)
    return web.json_response(targets(C))


async def drip(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    for _ in range(50):  # each byte in time, the whole answer never
        await resp.write(b" ")
        await asyncio.sleep(0.1)
    return resp


async def huge(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    try:
        for _ in range(MAX_BYTES // 4096 + 4):
            await resp.write(b" " * 4096)
    except ConnectionError:  # the follower stopped reading: as it should
        pass
    return resp


async def malformed(_: web.Request) -> web.Response:
    return web.Response(
        text='{"status": "success", "data": {"activeTa', content_type="application/json"
    )


async def nested(_: web.Request) -> web.Response:
    return web.Response(text="[" * 30_000 + "]" * 30_000)


async def wrong_shape(_: web.Request) -> web.Response:
    return web.json_response({"status": "success", "data": {"activeTargets": {"a": 1}}})


async def redirect(_: web.Request) -> web.Response:
    raise web.HTTPFound("http://127.0.0.1:9/api/v1/targets")


async def failing(_: web.Request) -> web.Response:
    return web.Response(status=503, text="busy")


@pytest.mark.parametrize(
    ("handler", "words"),
    [
        (slow, "no whole answer within"),
        (drip, "no whole answer within"),
        (huge, f"more than {MAX_BYTES} bytes"),
        (malformed, "no readable JSON"),
        (nested, "no readable JSON"),
        (wrong_shape, "without activeTargets"),  # a router's: "no worker list"
        (redirect, "answered 302 (redirects are not followed)"),
        (failing, "answered 503"),
    ],
)
@pytest.mark.parametrize("router", [False, True], ids=["prometheus", "router"])
async def test_a_hostile_source_fails_in_bounds_and_keeps_the_last_set(
    source, session, handler, words, router
):
    if router:
        source.doc = {"workers": [{"url": u, "worker_type": "prefill"} for u in (A, B)]}
        words = "no worker list" if handler is wrong_shape else words
    d = Discoverer(timeout=TIMEOUT_S, max_bytes=MAX_BYTES)
    s = spec(source.url, router=router)
    await look(d, s, session, 0.0)
    kinds(d)
    source.handler = handler
    began = time.monotonic()
    d.tick("ext", s, 1.0, session)
    assert time.monotonic() - began < 0.05  # the tick does not wait for the source
    await look(d, s, session, 1.0)  # the look already started: waited for here
    took = time.monotonic() - began
    assert took < TIMEOUT_S + 1.0, took
    assert d.found("ext") == {"prefill": {"prefill-0": A, "prefill-1": B}}  # kept
    failed = [c for _, c in d.events if c.kind == "attached.discovery_failed"]
    assert len(failed) == 1 and words in failed[0].message, failed
    d.events.clear()
    await look(d, s, session, 2.0)  # still failing: not told again
    assert kinds(d) == []
    shown = d.section("ext")
    assert shown is not None and words in (shown[0]["error"] or "")
    source.handler = source.answer
    await look(d, s, session, 3.0)
    assert kinds(d) == ["attached.discovery_recovered"]


async def test_a_changed_source_starts_afresh_and_a_forgotten_deployment_is_dropped(
    source, session
):
    d = Discoverer(timeout=TIMEOUT_S)
    await look(d, spec(source.url), session, 0.0)
    source.doc = {"workers": [{"url": C, "worker_type": "prefill"}]}
    await look(d, spec(source.url, router=True), session, 0.1)  # due at once: a new source
    assert d.found("ext") == {"prefill": {"prefill-0": C}}
    d.forget(set())
    assert d.found("ext") == {} and d.section("ext") is None
    await d.close()


async def test_close_cancels_a_look_in_flight(source, session):
    source.handler = slow
    d = Discoverer(timeout=10.0)
    d.tick("ext", spec(source.url), 0.0, session)
    began = time.monotonic()
    await d.close()
    assert time.monotonic() - began < 1.0
