"""The encode tier of an E -> P -> D deployment (PROTOCOL.md 4b): before its prefill, each
multimodal item of a chat request goes to an encode instance, as vLLM's EPD example proxy
sends it (examples/online_serving/disaggregated_encoder/disagg_epd_proxy.py): one request per
item, the item alone in a user message with all text removed, max_tokens 1, not streamed, the
items spread round-robin over the encoders and sent at once; the request goes on to prefill ->
decode only when every one succeeded. The encoders leave the embeddings in their EC
connector's store, where the prefill (an ec_consumer) finds them. Text-only requests skip it.

The encoders are instances of the proxy's pool (role encode: given by --encode or added
through /admin/instances), so health probes, drains and /admin/instances cover them. With
none available the request goes on without them: the prefill, an ec_consumer that finds no
embedding, runs the encoder itself (slower, never lost).

The wait counts in the TTFT the proxy measures (it starts at arrival); in the TTFT's parts
(domain/measures/ttft_parts.py) it falls in `queue`, before the first attempt, and
pdctl_proxy_encode_wait_seconds_total says how much of that was encoders.

The rewriting is pure (`mm_items`, `encoder_body`, `EncoderRing.pick`); `prime` is the I/O.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import aiohttp

from connector.errors import UpstreamError, UpstreamTimeout
from connector.pool.instances import Instance, InstancePool
from domain.modes import Role

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
    """The pool's encode instances, taken round-robin per item across requests."""

    def __init__(self, pool: InstancePool) -> None:
        self.pool = pool
        self._next = 0
        self.items = 0  # items sent to an encoder
        self.failed = 0  # of them, failed
        self.skipped = 0  # items of requests that found no encoder available
        self.seconds = 0.0  # wall seconds requests spent waiting on their encoders

    def pick(self, count: int) -> list[Instance]:
        """An encoder per item, round-robin; [] when none is available."""
        encoders = self.pool.encoders()
        if not encoders:
            return []
        start, self._next = self._next, self._next + count
        return [encoders[(start + i) % len(encoders)] for i in range(count)]

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
        items = mm_items(body) if path == CHAT_PATH else []
        targets = self.pick(len(items)) if items else []
        if not targets:  # none available (of some): the prefill will encode them itself
            if any(i.role is Role.ENCODE for i in self.pool):
                self.skipped += len(items)
            return 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        sends = [
            self._send(session, inst, encoder_body(body, item), child_request_id(request_id, i))
            for i, (item, inst) in enumerate(zip(items, targets, strict=True))
        ]
        self.items += len(items)
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*sends)
        except TimeoutError:
            self.failed += 1
            names = ",".join(sorted({inst.url for inst in targets}))
            raise UpstreamTimeout("encode", names, timeout_s) from None
        finally:
            self.seconds += loop.time() - started
        return len(items)

    async def _send(
        self, session: aiohttp.ClientSession, inst: Instance, body: dict[str, Any], rid: str
    ) -> None:
        headers = {"Content-Type": "application/json", "X-Request-Id": rid}
        inst.begin(0)
        ok = False
        try:
            async with session.post(
                inst.url + CHAT_PATH, data=json.dumps(body), headers=headers
            ) as resp:
                text = await resp.read()
                if resp.status != 200:
                    detail = text[:300].decode("utf-8", "replace")
                    raise UpstreamError("encode", inst.url, f"HTTP {resp.status}: {detail}")
            ok = True
            self.pool.leg_ok(inst)
        except aiohttp.ClientError as exc:
            why = str(exc) or type(exc).__name__
            raise UpstreamError("encode", inst.url, why, "connect") from None
        finally:
            inst.end(0, ok)
            if not ok:
                self.failed += 1
                inst.last_error = "encode leg failed"

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
        items.add_metric(["no_encoder"], self.skipped)  # the prefill encoded them itself
        seconds = CounterMetricFamily(
            "pdctl_proxy_encode_wait_seconds",
            "Seconds requests waited on their encoders before their prefill (part of TTFT).",
        )
        seconds.add_metric([], self.seconds)
        return [items, seconds]
