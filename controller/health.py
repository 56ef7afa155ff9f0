"""The supervisor's one seam to HTTP: instance /health, and the proxy's admin API (who is
registered, how much is in flight, drain and undrain). Failures read as "not healthy".

Each proxy has its own admin token (the supervisor generates it when it starts the proxy), so
every admin call names the token of the proxy it goes to."""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp

PROBE_TIMEOUT_S = 2.0


class Probe(Protocol):
    async def healthy(self, url: str) -> bool: ...

    async def proxy_instances(
        self, proxy_url: str, token: str | None
    ) -> list[dict[str, Any]] | None: ...

    async def set_draining(
        self, proxy_url: str, token: str | None, instance_url: str, draining: bool
    ) -> bool: ...

    async def proxy_refusals(
        self, proxy_url: str, token: str | None
    ) -> list[dict[str, Any]] | None: ...

    async def aclose(self) -> None: ...


def same_instance(entry: dict[str, Any], url: str) -> bool:
    """A proxy entry is this instance: same port (registrations may name the host by IP)."""
    return urlsplit(str(entry.get("url", ""))).port == urlsplit(url).port


def admin_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class HttpProbe:
    def __init__(self, timeout: float = PROBE_TIMEOUT_S) -> None:
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    async def healthy(self, url: str) -> bool:
        try:
            async with self._client().get(url + "/health") as resp:
                return resp.status == 200
        except (TimeoutError, aiohttp.ClientError):
            return False

    async def proxy_refusals(
        self, proxy_url: str, token: str | None
    ) -> list[dict[str, Any]] | None:
        """The registrations the proxy's registry refused lately (GET /admin/registry)."""
        try:
            async with self._client().get(
                proxy_url + "/admin/registry", headers=admin_headers(token)
            ) as resp:
                if resp.status != 200:
                    return None
                body = await resp.json()
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return None
        refusals = body.get("refusals") if isinstance(body, dict) else None
        return refusals if isinstance(refusals, list) else None

    async def proxy_instances(
        self, proxy_url: str, token: str | None
    ) -> list[dict[str, Any]] | None:
        try:
            async with self._client().get(
                proxy_url + "/admin/instances", headers=admin_headers(token)
            ) as resp:
                if resp.status != 200:
                    return None
                body = await resp.json()
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return None
        return body.get("instances", []) if isinstance(body, dict) else body

    async def set_draining(
        self, proxy_url: str, token: str | None, instance_url: str, draining: bool
    ) -> bool:
        verb = "drain" if draining else "undrain"
        entries = await self.proxy_instances(proxy_url, token) or []
        urls = [e["url"] for e in entries if same_instance(e, instance_url)] or [instance_url]
        ok = True
        for url in urls:
            try:
                async with self._client().post(
                    f"{proxy_url}/admin/instances/{verb}",
                    json={"url": url},
                    headers=admin_headers(token),
                ) as resp:
                    ok = ok and resp.status == 200
            except (TimeoutError, aiohttp.ClientError):
                ok = False
        return ok

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
