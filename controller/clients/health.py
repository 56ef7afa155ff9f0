"""The supervisor's one seam to HTTP: instance /health, and the proxy's admin API (who is
registered, how much is in flight, drain and undrain) through controller/clients/proxy_admin.py.
Failures read as "not healthy" or "no answer".

Each proxy has its own admin token (the supervisor generates it when it starts the proxy), so
every admin call names the token of the proxy it goes to."""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlsplit

import aiohttp

from controller.clients.pair_check import PairProbe
from controller.clients.proxy_admin import InstanceEntry, ProxyAdminClient, ProxyAdminError, Refusal
from domain.canary_marks import HEADER, PAIR_HEADER
from domain.kv_connectors import metric_prefixes

PROBE_TIMEOUT_S = 2.0
# What an engine's /metrics count as failed KV transfers (NIXL, and newer vLLM's MoRIIO).
FAILED_TRANSFERS = tuple(f"vllm:{p}_num_failed_transfers" for p in metric_prefixes())


class Probe(PairProbe, Protocol):
    # True: 200; False: refused, an error or another status; None: no answer in time (a hung
    # process, or one starved of CPU: controller/supervise/probing.py tells which it may be).
    async def healthy(self, url: str) -> bool | None: ...

    async def proxy_instances(
        self, proxy_url: str, token: str | None
    ) -> list[InstanceEntry] | None: ...

    # True: the proxy was told (or does not list it); False: it could not be told.
    async def set_draining(
        self, proxy_url: str, token: str | None, instance_url: str, draining: bool
    ) -> bool: ...

    async def proxy_refusals(self, proxy_url: str, token: str | None) -> list[Refusal] | None: ...

    async def failed_transfers(self, url: str) -> float | None: ...

    async def aclose(self) -> None: ...


def same_instance(entry: InstanceEntry, url: str) -> bool:
    """A proxy entry is this instance: same port (registrations may name the host by IP)."""
    return urlsplit(str(entry.get("url", ""))).port == urlsplit(url).port


def _listed_url(listed: list[InstanceEntry] | None, url: str) -> str | None:
    """The URL the proxy knows this instance by."""
    entry = next((e for e in listed or [] if same_instance(e, url)), None)
    return str(entry["url"]) if entry is not None else None


class HttpProbe:
    def __init__(self, timeout: float = PROBE_TIMEOUT_S) -> None:
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self._session

    def _admin(self, proxy_url: str, token: str | None) -> ProxyAdminClient:
        return ProxyAdminClient(proxy_url, lambda: token, self.timeout, session=self._client())

    async def healthy(self, url: str) -> bool | None:
        try:
            async with self._client().get(url + "/health") as resp:
                return resp.status == 200
        except TimeoutError:
            return None
        except aiohttp.ClientError:
            return False

    async def failed_transfers(self, url: str) -> float | None:
        """An instance's failed KV transfers, from its /metrics
        (controller/supervise/stale_peers.py)."""
        try:
            async with self._client().get(url + "/metrics") as resp:
                if resp.status != 200:
                    return None
                return failed_transfers(await resp.text())
        except (TimeoutError, aiohttp.ClientError, UnicodeDecodeError):
            return None

    async def pair_check(
        self,
        proxy_url: str,
        token: str | None,
        prefill_url: str,
        decode_url: str,
        body: dict,
        timeout: float,
    ) -> tuple[int | None, str]:
        """A canary pinned to the pair through the proxy (controller/clients/pair_check.py): its
        status and error message; (None, why) when it could not be sent or had no answer."""
        listed = await self.proxy_instances(proxy_url, token)
        urls = [_listed_url(listed, u) for u in (prefill_url, decode_url)]
        if token is None or None in urls:
            return None, "the proxy lists no such pair (or has no admin token)"
        headers = {HEADER: token, PAIR_HEADER: " ".join(str(u) for u in urls)}
        try:
            async with self._client().post(
                proxy_url + "/v1/completions",
                json=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                answer = await resp.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            return None, f"no answer: {exc or type(exc).__name__}"
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message", "") if isinstance(error, dict) else ""
        return resp.status, str(message)

    async def proxy_refusals(self, proxy_url: str, token: str | None) -> list[Refusal] | None:
        """The registrations the proxy's registry refused lately (GET /admin/registry)."""
        try:
            return await self._admin(proxy_url, token).refusals()
        except ProxyAdminError:
            return None

    async def proxy_instances(
        self, proxy_url: str, token: str | None
    ) -> list[InstanceEntry] | None:
        try:
            return await self._admin(proxy_url, token).instances()
        except ProxyAdminError:
            return None

    async def set_draining(
        self, proxy_url: str, token: str | None, instance_url: str, draining: bool
    ) -> bool:
        admin = self._admin(proxy_url, token)
        entries = await self.proxy_instances(proxy_url, token) or []
        urls = [e["url"] for e in entries if same_instance(e, instance_url)] or [instance_url]
        ok = True
        for url in urls:
            try:
                await (admin.drain(url) if draining else admin.undrain(url))
            except ProxyAdminError:  # not told: the caller tries again (one not listed is
                ok = False  # told: nothing routes there to drain or undrain)
        return ok

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def failed_transfers(text: str) -> float:
    """The failed-KV-transfer counters in a /metrics page, summed."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(FAILED_TRANSFERS) and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name.endswith("_total") or name in FAILED_TRANSFERS:
                try:
                    total += float(line.rsplit(" ", 1)[1])
                except ValueError:
                    continue
    return total
