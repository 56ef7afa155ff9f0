"""The render tier in front of the engines (PROTOCOL.md section 4b): when the proxy knows a
render instance, a client's completion request is rendered there to token ids
(`POST /v1/completions/render`, vLLM's GenerateRequest list) and the prefill and decode legs
generate on those ids (`prompt` as a list of token ids, which vLLM's /v1/completions takes).
The engines' answer is already the OpenAI response vLLM builds for a token-id prompt, so it
goes back to the client as it streams: the text is the text of the no-render-tier path, and
TTFT, ITL and the SLO verdict are measured exactly as before, with the render time inside
TTFT (the request's clock starts when it arrives, before the render call).

A chat request is rendered by `/v1/chat/completions/render` (its chat template applied there);
its legs go to /v1/completions with the ids, and the answer is put back in the chat shape
(connector/legs/chat_shape.py), scanned for measurement as the client receives it.

`tokens_body` is pure; `RenderTier.render` is the one I/O call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from connector.errors import UpstreamError
from connector.legs.chat_shape import COMPLETIONS, ChatShape, legs_body
from connector.legs.client_body import upstream_failure

RENDER_TIMEOUT_S = 30.0
RENDERED_PATHS = {
    "/v1/completions": "/v1/completions/render",
    "/v1/chat/completions": "/v1/chat/completions/render",
}


def tokens_body(body: dict[str, Any], rendered: Any) -> dict[str, Any] | None:
    """The legs' body: the client's with its prompt (a chat's messages) replaced by the
    rendered token ids; None when the render tier's answer is not one GenerateRequest with
    token ids."""
    if isinstance(rendered, list) and len(rendered) == 1:
        rendered = rendered[0]
    ids = rendered.get("token_ids") if isinstance(rendered, dict) else None
    if not isinstance(ids, list) or not ids or not all(type(t) is int for t in ids):
        return None
    if "messages" in body:
        return legs_body(body, ids)
    return {**body, "prompt": ids}


def legs_of(path: str) -> tuple[str | None, ChatShape | None]:
    """Where the legs of a rendered request go and how their answer is reshaped: a chat
    request's to /v1/completions, answered in the chat shape; a completion's as it came."""
    if path == COMPLETIONS:
        return None, None
    return COMPLETIONS, ChatShape()


class RenderTier:
    """The render instances the proxy knows (round-robin), and what rendering cost."""

    def __init__(self, urls: tuple[str, ...] = ()) -> None:
        self.urls: list[str] = [u.rstrip("/") for u in urls]
        self._next = 0
        self.rendered = 0
        self.failed = 0  # render calls that got no answer (tried on the next instance)
        self.render_seconds = 0.0

    def add(self, url: str) -> bool:
        url = url.rstrip("/")
        if url in self.urls:
            return False
        self.urls.append(url)
        return True

    def remove(self, url: str) -> bool:
        url = url.rstrip("/")
        if url not in self.urls:
            return False
        self.urls.remove(url)
        return True

    def describe(self) -> list[dict[str, Any]]:
        return [{"url": u, "role": "render"} for u in self.urls]

    def renders(self, path: str) -> bool:
        return bool(self.urls) and path in RENDERED_PATHS

    def _pick(self) -> str:
        self._next = (self._next + 1) % len(self.urls)
        return self.urls[self._next]

    async def render(
        self, session: aiohttp.ClientSession, path: str, raw: bytes, body: dict[str, Any]
    ) -> tuple[bytes, dict[str, Any]]:
        """The client's request as token ids. A render instance that cannot be reached (or
        does not answer) is skipped for the next one, since rendering changes nothing
        anywhere; an answer (a refusal, garbage) is the request's. Errors name the instance."""
        started = time.perf_counter()
        try:
            for tries_left in range(len(self.urls) - 1, -1, -1):
                url = self._pick()
                try:
                    answer = await self._post(session, url, RENDERED_PATHS[path], raw)
                    break
                except RenderUnreachable:
                    self.failed += 1
                    if not tries_left:
                        raise
        finally:
            self.render_seconds += time.perf_counter() - started
        try:
            rewritten = tokens_body(body, json.loads(answer))
        except (ValueError, RecursionError):
            rewritten = None
        if rewritten is None:
            raise UpstreamError(
                "render", url, f"answered 200 without token ids: {answer[:60]!r}", "garbage"
            )
        self.rendered += 1
        return json.dumps(rewritten, separators=(",", ":")).encode(), rewritten

    async def _post(self, session: aiohttp.ClientSession, url: str, path: str, raw: bytes) -> bytes:
        """One render call's answer. An answer that is an error is the client's error (not
        tried elsewhere); no answer is RenderUnreachable (tried on the next instance)."""
        try:
            async with session.post(
                url + path,
                data=raw,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=RENDER_TIMEOUT_S),
            ) as r:
                answer = await r.read()
                status = r.status
        except TimeoutError:
            raise RenderUnreachable(
                "render", url, f"no answer within {RENDER_TIMEOUT_S:g} s", "timeout"
            ) from None
        except aiohttp.ClientError as exc:
            raise RenderUnreachable("render", url, f"{type(exc).__name__}: {exc}") from None
        if status != 200:
            raise upstream_failure("render", url, status, answer)
        return answer


class RenderUnreachable(UpstreamError):
    """No answer from a render instance (refused, reset, timed out): the next one is tried."""


class RenderCollector:
    """The render tier as the proxy's /metrics shows it: instances known, requests rendered,
    and the seconds the proxy waited on render calls (inside the clients' TTFT)."""

    def __init__(self, tier: RenderTier) -> None:
        self.tier = tier

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "pdctl_proxy_render_instances", "Render tier instances known.", len(self.tier.urls)
        )
        yield CounterMetricFamily(
            "pdctl_proxy_rendered_requests",
            "Requests rendered to token ids by the render tier.",
            self.tier.rendered,
        )
        yield CounterMetricFamily(
            "pdctl_proxy_render_unreachable",
            "Render calls that got no answer and were tried on the next render instance.",
            self.tier.failed,
        )
        yield CounterMetricFamily(
            "pdctl_proxy_render_seconds",
            "Seconds spent waiting on the render tier (part of the clients' TTFT).",
            self.tier.render_seconds,
        )
