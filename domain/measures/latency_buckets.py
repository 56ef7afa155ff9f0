"""The proxy's own latency buckets: every one of vLLM's boundaries (PROTOCOL.md section 4), so
each vLLM bucket can still be read off pdctl's, plus Renard's R20 preferred numbers (12-14% apart)
across the range SLOs are set in.

Why finer than vLLM's: its ITL buckets are 25 ms apart between 25 and 100 ms and its TTFT
buckets 150 to 250 ms apart between 100 ms and 1 s. A p99 interpolated inside such a bucket
says where the bucket ends, not where the tail is: two windows whose ITL tails were 45 and
33 ms both read 49.8 ms, so the advisor could not see a change it had proposed take effect.
At R20's steps a percentile lands in the right 12-14% step. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence

from domain.measures.vllm_metrics import ITL_BUCKETS, TTFT_BUCKETS

# Renard's R20 series: 20 steps per decade, each 11-14% above the one before.
R20 = (
    1.0,
    1.12,
    1.25,
    1.4,
    1.6,
    1.8,
    2.0,
    2.24,
    2.5,
    2.8,
    3.15,
    3.55,
    4.0,
    4.5,
    5.0,
    5.6,
    6.3,
    7.1,
    8.0,
    9.0,
)


def r20_between(low: float, high: float) -> tuple[float, ...]:
    """R20 values in [low, high] (both > 0), at every decade they span."""
    if not 0 < low <= high:
        raise ValueError(f"need 0 < low <= high, got {low}, {high}")
    out = []
    for decade in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        for step in R20:
            value = float(f"{step * 10.0**decade:.3g}")  # 0.00112, not 0.0011200000000000001
            if low <= value <= high:
                out.append(value)
    return tuple(out)


def refined(base: Sequence[float], low: float, high: float) -> tuple[float, ...]:
    """`base`'s boundaries together with R20's in [low, high], sorted, each once."""
    return tuple(sorted(set(base) | set(r20_between(low, high))))


# ITL and TPOT SLOs live between a few ms and a few hundred; TTFT's between 5 ms and 10 s.
PROXY_ITL_BUCKETS = refined(ITL_BUCKETS, 0.002, 0.5)
PROXY_TTFT_BUCKETS = refined(TTFT_BUCKETS, 0.005, 10.0)
