"""The encode tier of an E -> P -> D deployment (PROTOCOL.md 4b): before its prefill, each
multimodal item of a chat request goes to an encode instance, as vLLM's EPD example proxy
sends it (examples/online_serving/disaggregated_encoder/disagg_epd_proxy.py): one request per
item, the item alone in a user message with all text removed, max_tokens 1, not streamed, the
items spread round-robin over the encoders and sent at once; the request goes on to prefill ->
decode only when every one succeeded. The encoders leave the embeddings in their EC
connector's store, where the prefill (an ec_consumer) finds them. Text-only requests skip it.

The rewriting is pure (`mm_items`, `encoder_body`, `EncoderRing`); `prime` is the I/O.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import aiohttp

from connector.errors import UpstreamError, UpstreamTimeout

# The content part types the example proxy sends to an encoder.
MM_TYPES = frozenset({"image_url", "audio_url", "input_audio"})
CHAT_PATH = "/v1/chat/completions"


def mm_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every multimodal content part of a chat body's messages, in order."""
    items: list[dict[str, Any]] = []
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") in MM_TYPES:
                items.append(part)
    return items


def encoder_body(body: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """One item's encoder request: the item alone, one token, not streamed."""
    return {
        "model": body.get("model"),
        "messages": [{"role": "user", "content": [item]}],
        "max_tokens": 1,
        "stream": False,
    }


def child_request_id(parent: str, index: int) -> str:
    """`<parent>:<index>:<6 hex>`, the example proxy's id for an item's encoder request."""
    return f"{parent}:{index}:{os.urandom(3).hex()}"


class EncoderRing:
    """The encode instances, taken round-robin per item across requests."""

    def __init__(self, urls: tuple[str, ...] = ()) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self._next = 0
        self.items = 0  # items sent to an encoder
        self.failed = 0  # of them, failed
        self.seconds = 0.0  # wall seconds requests spent waiting on their encoders

    def __bool__(self) -> bool:
        return bool(self.urls)

    def pick(self, count: int) -> list[str]:
        start, self._next = self._next, self._next + count
        return [self.urls[(start + i) % len(self.urls)] for i in range(count)]

    async def prime(
        self,
        session: aiohttp.ClientSession,
        path: str,
        body: dict[str, Any],
        request_id: str,
        timeout_s: float,
    ) -> int:
        """Send a chat request's items to the encoders and wait for all; the items sent.
        Raises UpstreamError (a 502 naming the encoder) if any fails."""
        items = mm_items(body) if path == CHAT_PATH and self.urls else []
        if not items:
            return 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        sends = [
            self._send(session, url, encoder_body(body, item), child_request_id(request_id, i))
            for i, (item, url) in enumerate(zip(items, self.pick(len(items)), strict=True))
        ]
        self.items += len(items)
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*sends)
        except TimeoutError:
            self.failed += 1
            raise UpstreamTimeout("encode", ",".join(self.urls), timeout_s) from None
        finally:
            self.seconds += loop.time() - started
        return len(items)

    async def _send(
        self, session: aiohttp.ClientSession, url: str, body: dict[str, Any], request_id: str
    ) -> None:
        headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
        try:
            async with session.post(
                url + CHAT_PATH, data=json.dumps(body), headers=headers
            ) as resp:
                text = await resp.read()
                if resp.status != 200:
                    self.failed += 1
                    detail = text[:300].decode("utf-8", "replace")
                    raise UpstreamError("encode", url, f"HTTP {resp.status}: {detail}")
        except aiohttp.ClientError as exc:
            self.failed += 1
            raise UpstreamError("encode", url, str(exc) or type(exc).__name__, "connect") from None

    def collect(self):
        """pdctl_proxy_encode_* families (a prometheus collector on the proxy's registry)."""
        from prometheus_client.core import CounterMetricFamily

        items = CounterMetricFamily(
            "pdctl_proxy_encode_items",
            "Multimodal items sent to encode instances, by outcome.",
            labels=["outcome"],
        )
        items.add_metric(["ok"], self.items - self.failed)
        items.add_metric(["failed"], self.failed)
        seconds = CounterMetricFamily(
            "pdctl_proxy_encode_wait_seconds",
            "Seconds requests waited on their encoders before their prefill (part of TTFT).",
        )
        seconds.add_metric([], self.seconds)
        return [items, seconds]
