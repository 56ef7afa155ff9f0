"""The admin API under /admin, with its own bearer token when one is set.

GET  /admin/instances                      instances with group, health and load, and the groups
POST /admin/instances                      add or update one instance:
    {url, role, group, zmq_address?, dp_size?, tp_size?}; role "render": a render tier
    instance (connector/dispatch/render_tier.py), listed under "render"
POST /admin/instances/remove|drain|undrain {url}
GET  /admin/groups                         groups with paused flag and instance counts
POST /admin/groups/{group}/pause|resume    hold or release dispatch for one group
GET  /admin/requests?limit=N               the most recent requests, newest last
GET  /admin/registry                       the ZMQ registry: who may register, what is expected,
                                           claims being probed, recent refusals (field named)
PUT  /admin/registry/expected              {expected: [{url, role, modes, zmq_address,
                                           tp_size, dp_size}] | null}: the registrations to
                                           accept (the controller's; null: believe /health)
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from connector.errors import BadRequest, NotFound, ProxyError, Unauthorized
from connector.legs.rewrite import MODES, check_combination
from connector.registry.trust import Expectations
from domain.modes import Role

if TYPE_CHECKING:
    from connector.proxy import Proxy

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_admin_app(proxy: Proxy) -> web.Application:
    token = proxy.settings.admin_token

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if token is not None:
                given = request.headers.get("Authorization", "")
                if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                    raise Unauthorized("the admin API needs 'Authorization: Bearer <token>'")
            return await handler(request)
        except ProxyError as exc:
            return web.json_response(exc.body(), status=exc.status, headers=exc.headers())

    app = web.Application(middlewares=[guard])
    routes = AdminRoutes(proxy)
    app.router.add_get("/instances", routes.list_instances)
    app.router.add_post("/instances", routes.add_instance)
    app.router.add_post("/instances/remove", routes.remove_instance)
    app.router.add_post("/instances/drain", routes.drain_instance)
    app.router.add_post("/instances/undrain", routes.undrain_instance)
    app.router.add_post("/instances/whole", routes.whole_instance)
    app.router.add_get("/groups", routes.list_groups)
    app.router.add_post("/groups/{group}/pause", routes.pause)
    app.router.add_post("/groups/{group}/resume", routes.resume)
    app.router.add_get("/requests", routes.recent_requests)
    app.router.add_get("/registry", routes.registry)
    app.router.add_put("/registry/expected", routes.set_expected)
    return app


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, RecursionError):
        raise BadRequest("request body is not valid JSON", "body") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object", "body")
    return body


def _field(body: dict[str, Any], name: str, kind: type, default: Any = None) -> Any:
    value = body.get(name, default)
    if value is None and default is None and name in ("url", "role"):
        raise BadRequest(f"field '{name}' is required", name)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise BadRequest(f"field '{name}' must be of type {kind.__name__}", name)
    return value


def _positive(body: dict[str, Any], name: str) -> int:
    value = _field(body, name, int, 1)
    if value is None:  # sent as null: the default
        return 1
    if value < 1:
        raise BadRequest(f"field '{name}' must be a positive integer", name)
    return value


class AdminRoutes:
    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.pool = proxy.pool

    async def list_instances(self, request: web.Request) -> web.Response:
        return web.json_response({**self.pool.describe(), "render": self.proxy.render.describe()})

    async def add_instance(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        url = _field(body, "url", str)
        role = _field(body, "role", str)
        group = _field(body, "group", str, body.get("mode", self.proxy.settings.mode))
        if not url.startswith(("http://", "https://")):
            raise BadRequest("field 'url' must start with http:// or https://", "url")
        if (
            role == Role.RENDER
        ):  # the render tier: no group, no KV (connector/dispatch/render_tier.py)
            self.proxy.render.add(url)
            return web.json_response({"url": url.rstrip("/"), "role": "render"}, status=201)
        was = self.pool.get(url.rstrip("/"))
        # one it routes to already that switches roles (or was configured): read its epoch
        reread = was is not None and (
            was.pd_epoch is not None or was.pd_fenced or was.source != "admin"
        )
        try:
            check_combination(self.proxy.settings.connector, group)
            inst = self.pool.upsert(
                url,
                role,
                group,
                zmq_address=_field(body, "zmq_address", str),
                dp_size=_positive(body, "dp_size"),
                tp_size=_positive(body, "tp_size"),
                source="admin",
            )
        except ValueError as exc:
            raise BadRequest(str(exc), "group" if "mode" in str(exc) else "role") from None
        if reread:
            await self.proxy.roles.refresh(inst)
        return web.json_response(inst.describe(), status=201)

    async def _url_of(self, request: web.Request) -> str:
        return _field(await _json_object(request), "url", str)

    async def remove_instance(self, request: web.Request) -> web.Response:
        url = await self._url_of(request)
        if self.proxy.render.remove(url):
            return web.json_response({"url": url.rstrip("/"), "role": "render"})
        inst = self.pool.remove(url)
        if inst is None:
            raise NotFound(f"no instance {url}")
        self.proxy.membership.table.forget(inst.url)
        return web.json_response(inst.describe())

    async def drain_instance(self, request: web.Request) -> web.Response:
        return await self._set_draining(request, True)

    async def undrain_instance(self, request: web.Request) -> web.Response:
        return await self._set_draining(request, False)

    async def _set_draining(self, request: web.Request, draining: bool) -> web.Response:
        url = await self._url_of(request)
        inst = self.pool.set_draining(url, draining)
        if inst is None:
            raise NotFound(f"no instance {url}")
        return web.json_response(inst.describe())

    async def whole_instance(self, request: web.Request) -> web.Response:
        """`{"url": ..., "whole": true}`: the instance also serves whole requests (no
        hand-off), as a colocated one would; `false` ends that."""
        body = await _json_object(request)
        url = _field(body, "url", str)
        whole = body.get("whole", True)
        if not isinstance(whole, bool):
            raise BadRequest("field 'whole' must be a boolean", "whole")
        inst = self.pool.set_whole(url, whole)
        if inst is None:
            raise NotFound(f"no instance {url}")
        return web.json_response(inst.describe())

    async def list_groups(self, request: web.Request) -> web.Response:
        held = self.proxy.metrics.held
        return web.json_response(
            {"groups": [g.describe() for g in self.pool.groups.values()], "held_requests": held}
        )

    def _group(self, request: web.Request) -> str:
        group = request.match_info["group"]
        if group not in MODES:
            raise NotFound(f"no group {group!r}; groups are {', '.join(MODES)}")
        return group

    async def pause(self, request: web.Request) -> web.Response:
        return web.json_response(self.pool.set_paused(self._group(request), True).describe())

    async def resume(self, request: web.Request) -> web.Response:
        return web.json_response(self.pool.set_paused(self._group(request), False).describe())

    async def recent_requests(self, request: web.Request) -> web.Response:
        unknown = sorted(set(request.query) - {"limit"})
        if unknown:
            raise BadRequest(
                f"unknown query parameter {unknown[0]!r}; the only one is 'limit'", unknown[0]
            )
        try:
            limit = int(request.query.get("limit", "100"))
        except ValueError:
            raise BadRequest("query 'limit' must be an integer", "limit") from None
        return web.json_response({"requests": self.proxy.requests.last(limit)})

    async def registry(self, request: web.Request) -> web.Response:
        gate = self.proxy.membership.gate
        now = self.proxy.membership.now()
        return web.json_response(
            {
                "listening_port": self.proxy.membership.port,
                "allow": gate.allow.describe(),
                "expected": gate.expectations.to_json() if gate.expectations else None,
                "registered": len(gate.table),
                "pending": sorted(gate.pending),
                "refusals": [
                    {**r.to_json(), "age_s": round(now - r.last, 3)} for r in gate.refusals.values()
                ],
            }
        )

    async def set_expected(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        if "expected" not in body:
            raise BadRequest("field 'expected' is required (a list, or null)", "expected")
        try:
            expected = (
                None if body["expected"] is None else Expectations.from_json(body["expected"])
            )
        except ValueError as exc:
            raise BadRequest(str(exc), "expected") from None
        dropped = self.proxy.membership.set_expectations(expected)
        return web.json_response(
            {"expected": expected.to_json() if expected else None, "dropped": dropped}
        )
