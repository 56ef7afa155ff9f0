"""An attached move aborted mid-way (its rollout cancelled) routes the instance at the proxy
again and settles its revision failed, naming the step: an engine that takes its time to
change roles and a pdctl proxy's admin API, both real HTTP on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from controller.clients.proxy_admin import ProxyAdminClient
from controller.switch.role_move import MoveAt, move_at, plan_move
from tests.controller.switch.test_role_move import flip

pytestmark = pytest.mark.anyio


class Changes:
    """The store's side of a move (state/changes.py's begin_change/settle_change)."""

    def __init__(self) -> None:
        self.begun: list[Any] = []
        self.settled: list[tuple[int, str, str | None]] = []

    def begin_change(self, name, spec, actor, reason, kind, *, rollout_id=None) -> int:
        self.begun.append((kind, spec.role_switch.serving))
        return 7

    def settle_change(self, name, revision, state, detail) -> None:
        self.settled.append((revision, state, detail))


async def serving(routes: list[web.RouteDef]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def test_an_aborted_move_undrains_and_settles_failed():
    calls: list[str] = []
    asked = asyncio.Event()

    async def role(request: web.Request) -> web.Response:  # switching, never ready
        return web.json_response({"role": "decode", "epoch": 0, "phase": "draining"})

    async def change(request: web.Request) -> web.Response:
        asked.set()
        return web.json_response({}, status=202)

    async def admin(request: web.Request) -> web.Response:
        calls.append(request.path)
        if request.path == "/admin/instances":
            return web.json_response({"instances": []})
        return web.json_response({})

    engine, engine_url = await serving(
        [web.get("/v1/pd_role", role), web.post("/v1/pd_role", change)]
    )
    proxy, proxy_url = await serving(
        [web.get("/admin/instances", admin), web.post("/admin/instances/{verb}", admin)]
    )
    events: list[tuple[str, str]] = []
    store = Changes()
    move = plan_move(flip(), "decode-1", "prefill")
    where = MoveAt("flip", engine_url, ProxyAdminClient(proxy_url, lambda: "t"))
    try:
        task = asyncio.create_task(
            move_at(
                where,
                move,
                store,
                lambda actor, kind, message, name, detail: events.append((kind, message)),
                actor="op",
                reason="test",
                drain_timeout_s=30,
                rollout_id=None,
            )
        )
        await asyncio.wait_for(asked.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await engine.cleanup()
        await proxy.cleanup()
    assert calls[0] == "/admin/instances/drain" and calls[-1] == "/admin/instances/undrain"
    assert store.begun == [("role_move", {"decode-1": "prefill"})]
    [(revision, state, detail)] = store.settled
    assert (revision, state) == (7, "failed")
    assert detail == "flip/decode-1: decode -> prefill: aborted at change role on the instance"
    assert events == [("deployment.role_move_failed", detail)]
