"""The times `vllm bench serve --seed S` offers requests at: `pdctl bench --arrivals vllm`, and
the planner's arrivals (published results were measured with vLLM's client).

vLLM seeds numpy's legacy global generator with the seed and draws each gap from
`np.random.gamma(burstiness, 1 / (rate * burstiness))`, then rescales the cumulative times so
the last arrival falls at exactly num_prompts / rate. This is that schedule without numpy:
numpy's legacy generator is the Mersenne Twister seeded by init_genrand, whose doubles are
Python's own `random.random()`, and its exponential, normal and gamma draws are the legacy
algorithms below. Same seed, same rate: the same arrival times as vLLM's client, so two
clients can be compared on one workload. Pure: numbers in, seconds out.
"""

from __future__ import annotations

import math
import random
from itertools import accumulate

MT_WORDS = 624


def vllm_arrival_times(count: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Seconds from the start of the run at which each of `count` requests arrives."""
    if count <= 0:
        return []
    if math.isinf(rate):
        return [0.0] * count
    if math.isinf(burstiness):
        gaps = [1.0 / rate] * count
    else:
        draws = LegacyGamma(seed)
        scale = 1.0 / (rate * burstiness)
        gaps = [draws.gamma(burstiness, scale) for _ in range(count)]
    times = list(accumulate(gaps))
    if times[-1] == 0:
        return times
    stretch = (count / rate) / times[-1]
    return [t * stretch for t in times]


class LegacyGamma:
    """numpy's legacy `RandomState(seed)`: gamma draws, with the state their normals share."""

    def __init__(self, seed: int) -> None:
        self._doubles = mersenne_twister(seed)
        self._spare_normal: float | None = None

    def gamma(self, shape: float, scale: float) -> float:
        return scale * self.standard_gamma(shape)

    def standard_gamma(self, shape: float) -> float:
        if shape == 1.0:
            return self._exponential()
        if shape < 1.0:
            return self._small_shape_gamma(shape)
        # Marsaglia and Tsang, as numpy's legacy_standard_gamma
        b = shape - 1.0 / 3.0
        c = 1.0 / math.sqrt(9 * b)
        while True:
            while True:
                x = self._normal()
                v = 1.0 + c * x
                if v > 0.0:
                    break
            v = v * v * v
            u = self._double()
            if u < 1.0 - 0.0331 * (x * x) * (x * x):
                return b * v
            if math.log(u) < 0.5 * x * x + b * (1.0 - v + math.log(v)):
                return b * v

    def _small_shape_gamma(self, shape: float) -> float:
        while True:
            u = self._double()
            v = self._exponential()
            if u <= 1.0 - shape:
                x = u ** (1.0 / shape)
                if x <= v:
                    return x
            else:
                y = -math.log((1 - u) / shape)
                x = (1.0 - shape + shape * y) ** (1.0 / shape)
                if x <= v + y:
                    return x

    def _double(self) -> float:
        return self._doubles.random()

    def _exponential(self) -> float:
        return -math.log(1.0 - self._double())

    def _normal(self) -> float:
        # the polar method, keeping the second normal of each pair for the next call
        if self._spare_normal is not None:
            spare, self._spare_normal = self._spare_normal, None
            return spare
        while True:
            x1 = 2.0 * self._double() - 1.0
            x2 = 2.0 * self._double() - 1.0
            r2 = x1 * x1 + x2 * x2
            if 0.0 < r2 < 1.0:
                break
        f = math.sqrt(-2.0 * math.log(r2) / r2)
        self._spare_normal = f * x1
        return f * x2


def mersenne_twister(seed: int) -> random.Random:
    """Python's Mersenne Twister in the state numpy's `RandomState(seed)` starts from
    (init_genrand; Python's own `seed()` would use init_by_array)."""
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    state = [seed]
    for i in range(1, MT_WORDS):
        previous = state[-1]
        state.append((1812433253 * (previous ^ (previous >> 30)) + i) & 0xFFFFFFFF)
    generator = random.Random()
    generator.setstate((3, (*state, MT_WORDS), None))
    return generator
