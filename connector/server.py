"""The proxy as a server: the aiohttp app with its routes, and running it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging

from aiohttp import web

from connector.api import admin, openapi
from connector.api.info import InfoRoutes
from connector.http.read_deadlines import HeadDeadlineSite, mark_busy
from connector.proxy import PROXY_KEY, RUNNER_KWARGS, Proxy
from connector.settings import ProxySettings

log = logging.getLogger("connector.proxy")
GC_YOUNG_THRESHOLD = 10_000  # allocations between young collections (CPython's default: 700)


def create_app(settings: ProxySettings) -> web.Application:
    """The proxy app; the session, registry listener and background loops start with it."""
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[mark_busy])
    proxy = Proxy(settings)
    app[PROXY_KEY] = proxy
    app.on_startup.append(proxy.startup)
    app.on_cleanup.append(proxy.cleanup)
    app.router.add_post("/v1/completions", proxy.generate)
    app.router.add_post("/v1/chat/completions", proxy.generate)
    info = InfoRoutes(proxy)
    app.router.add_get("/v1/models", info.models)
    app.router.add_get("/health", info.health)
    app.router.add_get("/metrics", info.metrics_text)
    app.router.add_get("/openapi.json", openapi.serve)
    app.add_subapp("/admin", admin.create_admin_app(proxy))
    return app


async def start(settings: ProxySettings) -> tuple[web.AppRunner, web.Application]:
    """Start the proxy on settings.host:port (port 0: any); returns the runner and the app."""
    app = create_app(settings)
    runner = web.AppRunner(app, **RUNNER_KWARGS)
    try:
        await runner.setup()  # its startup binds the registry
    except BaseException as exc:
        with contextlib.suppress(Exception):  # the runner would not: close what startup opened
            await app[PROXY_KEY].cleanup(app)
        if isinstance(exc, OSError):  # the registry's own listener (connector/registry/zmtp.py)
            raise RegistryBindError(exc.errno, exc.strerror) from exc
        raise
    try:
        site = HeadDeadlineSite(runner, settings.host, settings.port, settings.header_timeout)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, app


class ListenError(RuntimeError):
    """A port the proxy was told to take is not free; the message names the flag."""


class RegistryBindError(OSError):
    """The registry's port could not be bound (at startup, before the HTTP port)."""


async def start_or_explain(settings: ProxySettings) -> tuple[web.AppRunner, web.Application]:
    """`start`, with a port that cannot be bound reported by its flag, not as a traceback."""
    import zmq

    try:
        return await start(settings)
    except (zmq.ZMQError, RegistryBindError) as exc:
        raise ListenError(
            f"cannot listen for registrations on {settings.host}:"
            f"{settings.registry_port} (--registry-port): {exc.strerror}"
        ) from None
    except OSError as exc:
        raise ListenError(
            f"cannot listen on {settings.host}:{settings.port} (--port): {exc.strerror or exc}"
        ) from None


def bound_port(runner: web.BaseRunner) -> int:
    for site in runner.sites:
        if isinstance(site, HeadDeadlineSite):
            return site.port
    for addr in runner.addresses:  # a plain aiohttp site (the tests' fake engines)
        return int(addr[1])
    raise RuntimeError("the proxy is not listening")


def serve(settings: ProxySettings) -> None:
    """Run until interrupted, on uvloop when it is installed."""

    async def main() -> None:
        runner, app = await start_or_explain(settings)
        # What startup built lives as long as the process: keep it out of every collection,
        # and collect the young generation less often (each request allocates hundreds of
        # objects, few of them in cycles).
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        proxy = app[PROXY_KEY]
        log.info(
            "pdctl proxy on http://%s:%d (registry port %s)",
            settings.host,
            bound_port(runner),
            proxy.registry_port,
        )
        print(
            f"pdctl proxy listening on http://{settings.host}:{bound_port(runner)}"
            f" (registry: {proxy.registry_port})",
            flush=True,
        )
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        import uvloop
    except ImportError:
        asyncio_run = asyncio.run
    else:
        asyncio_run = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        asyncio_run(main())
