"""vLLM 0.32's histogram bucket boundaries (tests/fixtures/vllm/*_metrics.txt) and the
plain histogram the stand-in's collector fills and renders."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from prometheus_client.utils import floatToGoString

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
NIXL_XFER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
NIXL_POST_BUCKETS = (0.001, *NIXL_XFER_BUCKETS)
NIXL_BYTES_BUCKETS = tuple(float(2**p) for p in range(11, 34, 2))
NIXL_DESC_BUCKETS = (10, 20, 30, 50, 75, 100, 200, 400, 1000, 2000, 4000, 10000, 20000, 50000)
# Newer vLLM's MoRIIO stats (moriio/stats.py) were made to mirror NIXL's shapes: the same
# buckets under vllm:moriio_* (tests/simulator/test_moriio_metrics.py holds them to source).
TRANSFER_BUCKETS = {
    "xfer_time_seconds": NIXL_XFER_BUCKETS,
    "post_time_seconds": NIXL_POST_BUCKETS,
    "bytes_transferred": NIXL_BYTES_BUCKETS,
    "num_descriptors": NIXL_DESC_BUCKETS,
}
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)


def length_buckets(max_len: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 series up to max_model_len."""
    out: list[int] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exp
            if value > max_len:
                return tuple(float(v) for v in out)
            out.append(value)
        exp += 1


class BucketHistogram:
    """Cumulative-at-render histogram: counts per bucket, sum and count."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += times
        self.count += times
        self.sum += value * times

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            out.append((fmt_bound(bound), running))
        out.append(("+Inf", self.count))
        return out


def fmt_bound(bound: float) -> str:
    return floatToGoString(bound)  # as prometheus_client writes `le`: 2048.0, 2.097152e+06
