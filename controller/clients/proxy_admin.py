"""The one client of a deployment's proxy admin API (connector/api/admin.py documents it, and
connector/api/openapi.py describes it), shared by the supervisor's health probe and the mode switch.

Each proxy has its own bearer token, asked for at every call: a proxy restarted meanwhile has a
new one. Every failure (unreachable, timed out, refused, an answer of the wrong shape) is a
ProxyAdminError; an instance the proxy does not list is not an error for drain, undrain and
whole (they answer False: nothing to do there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict, cast

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from domain.errors import UpstreamError

ADMIN_TIMEOUT_S = 10.0
REJECTED_SAMPLE = "pdctl_proxy_requests_total"  # outcome="rejected": 503 with Retry-After

TokenSource = Callable[[], str | None]


class InstanceEntry(TypedDict, total=False):
    """One instance as GET /admin/instances lists it (connector/pool/instances.py `describe`)."""

    url: str
    role: str  # prefill | decode | both
    group: str  # the mode group it routes in: read | write | colocated
    zmq_address: str | None
    healthy: bool
    draining: bool
    whole: bool  # also serves whole requests (no hand-off)
    outstanding_requests: int
    outstanding_tokens: int
    failed: int  # requests (attempts) that failed on it
    ejected_for_s: float  # seconds its ejection lasts still (0: not ejected)


class Refusal(TypedDict, total=False):
    """A registration the proxy's registry refused lately (GET /admin/registry)."""

    url: str
    reason: str
    field: str
    message: str
    count: int
    age_s: float


class ProxyAdminError(UpstreamError):
    """An admin call that did not do what it asked; `proxy_status` is the proxy's answer, if
    it answered at all."""

    title = "Proxy admin call failed"

    def __init__(self, message: str, proxy_status: int | None = None) -> None:
        super().__init__(message)
        self.proxy_status = proxy_status


def admin_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class ProxyAdminClient:
    """Calls to one proxy at `base_url` (or where a callable says it is at each call: a proxy
    that is starting may not be placed yet). Pass `session` to share one (it is then not
    closed here); otherwise the client makes its own and `aclose()` closes it."""

    def __init__(
        self,
        base_url: str | Callable[[], str],
        token: TokenSource = lambda: None,
        timeout: float = ADMIN_TIMEOUT_S,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self._where = base_url
        self.token = token
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._session, self._owned = session, session is None

    @property
    def base_url(self) -> str:
        where = self._where if isinstance(self._where, str) else self._where()
        return where.rstrip("/")

    async def aclose(self) -> None:
        if self._owned and self._session is not None:
            await self._session.close()
            self._session = None

    # -- reads -------------------------------------------------------------------------------

    async def instances(self) -> list[InstanceEntry]:
        body = await self._call("GET", "/admin/instances")
        listed = body.get("instances") if isinstance(body, dict) else body
        if not isinstance(listed, list):
            raise ProxyAdminError("GET /admin/instances: no instance list in the answer")
        # JSON checked as far as the callers rely on: an object with a url
        return [
            cast(InstanceEntry, e)
            for e in listed
            if isinstance(e, dict) and isinstance(e.get("url"), str)
        ]

    async def recent_requests(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The proxy's request log, newest last (each line may carry its `ttft_parts`)."""
        body = await self._call("GET", f"/admin/requests?limit={int(limit)}")
        listed = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(listed, list):
            raise ProxyAdminError("GET /admin/requests: no request list in the answer")
        return [e for e in listed if isinstance(e, dict)]

    async def refusals(self) -> list[Refusal]:
        body = await self._call("GET", "/admin/registry")
        refusals = body.get("refusals") if isinstance(body, dict) else None
        if not isinstance(refusals, list):
            raise ProxyAdminError("GET /admin/registry: no refusal list in the answer")
        return refusals

    async def rejected(self) -> int:
        """Requests the proxy refused with 503 so far (its /metrics, no token needed)."""
        text = await self._call("GET", "/metrics", text=True)
        try:
            families = list(text_string_to_metric_families(text))
        except ValueError as exc:
            raise ProxyAdminError(f"GET /metrics: not Prometheus text: {exc}") from None
        return int(
            sum(
                s.value
                for f in families
                for s in f.samples
                if s.name == REJECTED_SAMPLE and s.labels.get("outcome") == "rejected"
            )
        )

    # -- routing -----------------------------------------------------------------------------

    async def pause(self, group: str) -> None:
        """New requests for `group` wait in the proxy's bounded queue."""
        await self._call("POST", f"/admin/groups/{group}/pause", {})

    async def resume(self, group: str) -> None:
        await self._call("POST", f"/admin/groups/{group}/resume", {})

    async def drain(self, url: str) -> bool:
        return await self._instance_call("drain", {"url": url})

    async def undrain(self, url: str) -> bool:
        return await self._instance_call("undrain", {"url": url})

    async def set_whole(self, url: str, whole: bool) -> bool:
        return await self._instance_call("whole", {"url": url, "whole": whole})

    async def add(self, url: str, role: str) -> None:
        """Route to `url` as a `role` instance (in the proxy's own group)."""
        await self._call("POST", "/admin/instances", {"url": url, "role": role})

    async def remove(self, url: str) -> bool:
        return await self._instance_call("remove", {"url": url})

    async def expect(self, registrations: list[dict[str, Any]] | None) -> None:
        """The registrations to accept (connector/registry/trust.py); None: believe /health."""
        await self._call("PUT", "/admin/registry/expected", {"expected": registrations})

    # -- the wire ----------------------------------------------------------------------------

    async def _instance_call(self, verb: str, body: dict[str, Any]) -> bool:
        try:
            await self._call("POST", f"/admin/instances/{verb}", body)
        except ProxyAdminError as exc:
            if exc.proxy_status == 404:
                return False  # not registered (yet): nothing to drain or flag
            raise
        return True

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, text: bool = False
    ) -> Any:
        what = f"{method} {path}"
        headers = {} if path == "/metrics" else admin_headers(self.token())
        try:
            async with self._client().request(
                method, self.base_url + path, json=body, headers=headers, timeout=self.timeout
            ) as resp:
                if resp.status >= 300:
                    detail = (await resp.text())[:200]
                    raise ProxyAdminError(f"{what}: {resp.status} {detail}", resp.status)
                return await resp.text() if text else await resp.json()
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            raise ProxyAdminError(f"{what}: {type(exc).__name__}: {exc}".rstrip(": ")) from exc
