"""An attached instance's /metrics is whatever its address answers: a slow, huge, malformed or
redirecting page leaves that target down with the reason, within the scrape's timeout, and
never hangs or breaks the observer (real servers on loopback)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import aiohttp
from aiohttp import web

from observe.scrape.observer import Observer
from observe.scrape.settings import ObserveSettings
from observe.scrape.targets import MAX_METRICS_BYTES
from state.hub import Hub
from tests.observe.metrics_endpoint import serve_metrics

GOOD = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3.0\n"
TIMEOUT_S = 0.3


async def slow(_: web.Request) -> web.Response:
    await asyncio.sleep(3)
    return web.Response(text=GOOD)


async def huge(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    chunk = b"# " + b"x" * (1 << 20) + b"\n"
    try:
        for _ in range(MAX_METRICS_BYTES // len(chunk) + 2):
            await resp.write(chunk)
    except ConnectionError:  # the scraper stopped reading: as it should
        pass
    return resp


async def malformed(_: web.Request) -> web.Response:
    return web.Response(text="vllm:num_requests_running{ not a sample\n\x00\x01")


async def redirect(_: web.Request) -> web.Response:
    raise web.HTTPFound("http://127.0.0.1:9/metrics")


def test_hostile_metrics_pages_leave_their_target_down_quickly():
    async def body():
        servers = [await serve_metrics(h) for h in (slow, huge, malformed, redirect)]
        observer = Observer(None, SimpleNamespace(engine=None), Hub(), ObserveSettings())
        observer._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))
        units = [
            {"name": f"decode-{i}", "url": url, "state": "RUNNING", "attached": True}
            for i, (_, url) in enumerate(servers)
        ]
        try:
            began = time.monotonic()
            states = await asyncio.gather(*(observer._scrape("ext", u, 1.0) for u in units))
            took = time.monotonic() - began
        finally:
            await observer.close()
            for runner, _ in servers:
                await runner.cleanup()
        assert [s.up for s in states] == [False, False, False, False]
        assert took < TIMEOUT_S + 1.5, took  # the slow one is cut off at the timeout
        events = {t.detail["instance"]: t.detail["why"] for _, t in observer._health_events}
        assert "no answer within" in events["decode-0"]
        assert "larger than" in events["decode-1"]
        assert events["decode-3"] == "/metrics answered 302"  # redirects are not followed

    asyncio.run(body())
