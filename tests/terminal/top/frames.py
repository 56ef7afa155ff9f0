"""Frames for the `pdctl top` tests, built as observe/ builds them (its histogram and
percentile code over vLLM's buckets), so the renderer is tested on the real shape."""

from __future__ import annotations

import math
from typing import Any

from domain.measures.vllm_metrics import ITL_BUCKETS, TTFT_BUCKETS
from observe.metrics.quantiles import histogram


def hist(bounds: tuple[float, ...], samples: list[float]) -> dict[str, Any]:
    cumulative = [(b, float(sum(1 for s in samples if s <= b))) for b in (*bounds, math.inf)]
    return dict(histogram(cumulative))


def instance(name: str, role: str, state: str = "RUNNING", **over: Any) -> dict[str, Any]:
    return {
        "name": name,
        "role": role,
        "state": state,
        "url": "http://127.0.0.1:20001",
        "mode": "read",
        "up": state == "RUNNING",
        "running": 2,
        "waiting": 1,
        "kv_cache_usage": 0.25 if state == "RUNNING" else None,  # as observe/ leaves a down one
        "loop_lag_s": 0.001,
        **over,
    }


def frame(
    ttft: list[float] | None = None,
    itl: list[float] | None = None,
    slo: tuple[float | None, float | None] = (200.0, 50.0),
    instances: list[dict[str, Any]] | None = None,
    **over: Any,
) -> dict[str, Any]:
    """A 1m frame: TTFTs around 80 ms and gaps around 12 ms unless given."""
    ttft = [0.03 + 0.001 * i for i in range(100)] if ttft is None else ttft
    itl = [0.008 + 0.0001 * i for i in range(400)] if itl is None else itl
    return {
        "type": "frame",
        "deployment": "mori",
        "ts": 1_790_000_000.0,
        "window": "1m",
        "simulated": True,
        "slo": {"ttft_ms": slo[0], "itl_ms": slo[1], "itl_stat": "p99"},
        "ttft": hist(TTFT_BUCKETS, ttft),
        "itl": hist(ITL_BUCKETS, itl),
        "engine_ttft": None,
        "engine_itl": None,
        "slo_attainment": 0.985 if ttft else None,
        "request_goodput": 7.9 if ttft else None,
        "request_rate": 8.0 if ttft else None,
        "rejected_share": 0.0 if ttft else None,
        "outcomes": {"ok": 8.0, "failed": 0.0, "rejected": 0.0, "cancelled": 0.0, "invalid": 0.0},
        "kv": {
            "bytes_per_s": 12.3e6,
            "source": "derived",
            "xfer_p50_ms": None,
            "xfer_p99_ms": None,
        },
        "running": 4,
        "waiting": 0,
        "kv_cache_usage": 0.12,
        "instances": [instance("prefill-0", "prefill"), instance("decode-0", "decode")]
        if instances is None
        else instances,
        "proxy": {"up": True, "in_flight": 3, "held": 0, "loop_lag_s": 0.0},
        "windows": {w: {"slo_attainment": 0.985} for w in ("10s", "1m", "5m")},
        **over,
    }


def events(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "ts": f"2026-12-01T16:{i % 60:02d}:00Z",
            "actor": "alice",
            "kind": "start",
            "deployment": "mori",
            "message": f"mori: event number {i}",
            "detail": {},
        }
        for i in range(1, n + 1)
    ]
