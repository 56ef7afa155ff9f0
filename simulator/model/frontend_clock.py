"""The stand-in's API server CPU, as real vLLM's would spend it: vLLM runs its engine in a
child process, so its API server's `process_cpu_seconds_total` is the frontend alone (HTTP,
parsing, tokenizing, detokenizing, streaming). The stand-in's one process also runs its
modelled engine, and the laptop's CPU is not the modelled host's, so it charges what vLLM's
API server costs per request, per text prompt token and per output token
(domain/engine/frontend_cost.py, from `make bench-frontend`) instead of reading its own CPU. Under
--time-scale K every charge is K times as large (EngineSettings.frontend_wall_cost), as every
modelled time is: the CPU share at a wall rate is the modelled host's at K times that rate.

One API server process is one core: work charged faster than that waits its turn, so the
counter never rises faster than one CPU-second per second (a saturated frontend reads 1.0).
A prompt sent as token ids (a render tier's) costs nothing per token: nothing to tokenize.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from domain.engine.frontend_cost import VLLM_API_SERVER, FrontendCost


class FrontendClock:
    def __init__(
        self, cost: FrontendCost = VLLM_API_SERVER, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.cost, self._clock = cost, clock
        self._charged = 0.0  # CPU-seconds of work taken in
        self._busy_until = 0.0  # when the one core has done all of it

    def request(self, text_prompt_tokens: int) -> None:
        """A request arrived: its HTTP and parsing, and tokenizing a text prompt."""
        self._charge(self.cost.cpu_ms(text_prompt_tokens, 0) / 1e3)

    def output(self, tokens: int) -> None:
        """Output tokens detokenized and written to the client."""
        if tokens > 0:
            self._charge(self.cost.output_us * tokens / 1e6)

    def cpu_seconds(self) -> float:
        """CPU-seconds spent so far: what was charged, less what still waits for the core."""
        return self._charged - max(0.0, self._busy_until - self._clock())

    def _charge(self, seconds: float) -> None:
        self._busy_until = max(self._clock(), self._busy_until) + seconds
        self._charged += seconds


def parse_cost(value: str, flag: str = "--frontend-cost") -> FrontendCost:
    """'BASE_MS,PROMPT_US,OUTPUT_US' (each >= 0) as a FrontendCost; ValueError naming `flag`."""
    parts = value.split(",")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) != 3 or any(not 0 <= n < 1e6 for n in numbers):
        raise ValueError(
            f"{flag} must be BASE_MS,PROMPT_US,OUTPUT_US: three numbers from 0 (ms per "
            f"request, us per text prompt token, us per output token), not {value!r}"
        )
    return FrontendCost(*numbers)
