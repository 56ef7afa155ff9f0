"""The proxy's read-only routes beside generation: /v1/models (an engine's list, passed on),
/health and /metrics.
"""

from __future__ import annotations

import aiohttp
from aiohttp import web

from connector.errors import NoInstance, UpstreamError, UpstreamTimeout
from connector.legs.client_body import upstream_message
from connector.proxy import Proxy, error_response


class InfoRoutes:
    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.pool = proxy.pool
        s = proxy.settings
        # an engine lists its models within the bound its prefill leg has
        self._timeout = aiohttp.ClientTimeout(
            total=s.prefill_timeout, sock_connect=s.connect_timeout
        )

    async def models(self, request: web.Request) -> web.Response:
        session = self.proxy.relay.client()
        candidates = [i for i in self.pool if i.available and i.role != "prefill"]
        candidates += [i for i in self.pool if i.available and i.role == "prefill"]
        if not candidates:
            return error_response(NoInstance("no instance is available to list models"))
        inst = candidates[0]
        try:
            async with session.get(inst.url + "/v1/models", timeout=self._timeout) as r:
                raw = await r.read()
                if r.status != 200:
                    raise UpstreamError(
                        "models", inst.url, f"HTTP {r.status}: {upstream_message(raw)}"
                    )
        except TimeoutError:
            return error_response(
                UpstreamTimeout("models", inst.url, self.proxy.settings.prefill_timeout)
            )
        except aiohttp.ClientError as exc:
            return error_response(UpstreamError("models", inst.url, type(exc).__name__))
        except UpstreamError as exc:
            return error_response(exc)
        return web.Response(body=raw, content_type="application/json")

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "routable": self.pool.route_possible(),
                "groups": [g.describe() for g in self.pool.groups.values()],
            }
        )

    async def metrics_text(self, request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return web.Response(
            body=generate_latest(self.proxy.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )
