"""vLLM's per-request timing as a response carries it (`vllm serve --enable-per-request-metrics`,
vLLM 0.32's entrypoints/generate/base/serving.py): a top-level `metrics` object on a whole
response and on a stream's usage chunk, in ms, from the engine that answered. TTFT there runs
from the request's scheduling (its queue time apart). Read by `pdctl bench` and the canary."""

from __future__ import annotations

import math
from typing import Any

# What pdctl keeps of `metrics` (it also carries generation_time_ms and tokens_per_second)
FIELDS = ("queue_time_ms", "time_to_first_token_ms", "mean_itl_ms")


def read(metrics: Any) -> dict[str, float] | None:
    """The finite numbers of FIELDS in a response's `metrics`; None when it has none."""
    if not isinstance(metrics, dict):
        return None
    kept = {
        k: float(v)
        for k in FIELDS
        if isinstance(v := metrics.get(k), int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
    }
    return kept or None
