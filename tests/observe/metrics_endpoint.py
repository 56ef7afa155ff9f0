"""A real /metrics endpoint on loopback for the observer's tests: an aiohttp app on a port the
kernel picks, answered by the test's handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web


async def serve_metrics(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> tuple[web.AppRunner, str]:
    """(the runner, to clean up; the endpoint's base URL)."""
    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"
