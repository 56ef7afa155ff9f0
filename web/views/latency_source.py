"""Which source the deployment page's TTFT and ITL tiles show (the frame's `latency_source`),
and an attached deployment's engine-side TTFT parts (`ttft_breakdown`,
observe/attached/ttft.py) as one line. static/pdctl-live.js writes the same words live."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SAID = {
    "proxy": "client side",
    "engines": "engines' own histograms (prefill + decode legs)",
}
LABELS = (
    ("prefill_queue", "prefill queue"),
    ("prefill", "prefill"),
    ("kv_transfer", "KV transfer"),
    ("decode_queue", "decode queue"),
    ("decode_queue_and_kv", "decode queue + KV"),
    ("first_decode_step", "first decode step"),
)


def latency_view(source: str | None, breakdown: Mapping[str, Any] | None) -> dict[str, Any]:
    """{"source", "said", "parts"}: `parts` the breakdown's line (None: no breakdown)."""
    source = source if source in SAID else "proxy"
    return {"source": source, "said": SAID[source], "parts": parts_line(breakdown)}


def parts_line(breakdown: Mapping[str, Any] | None) -> str | None:
    """ "engines' mean TTFT parts: prefill queue 25 · prefill 154 · ... = 437 ms"."""
    if not breakdown or breakdown.get("sum_ms") is None:
        return None
    parts = breakdown.get("parts") or {}
    shown = [f"{label} {parts[key]:.0f}" for key, label in LABELS if parts.get(key) is not None]
    return f"engines' mean TTFT parts: {' · '.join(shown)} = {breakdown['sum_ms']:.0f} ms"
