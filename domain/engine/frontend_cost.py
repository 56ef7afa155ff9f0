"""What vLLM's API server spends CPU on per request: a fixed part, a part per prompt token
(parsing, tokenizing: what a render tier takes over) and a part per output token (detokenizing,
building and writing each chunk: what stays on the engines' API servers). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class FrontendCost:
    base_ms: float  # per request: HTTP, parsing, the response around the tokens
    prompt_us: float  # per prompt token
    output_us: float  # per output token

    def cpu_ms(self, prompt_tokens: float, output_tokens: float) -> float:
        return (
            self.base_ms + (self.prompt_us * prompt_tokens + self.output_us * output_tokens) / 1e3
        )

    def scaled(self, factor: float) -> FrontendCost:
        """Every part `factor` times as slow."""
        return FrontendCost(self.base_ms * factor, self.prompt_us * factor, self.output_us * factor)

    def render_share(self, prompt_tokens: float, output_tokens: float) -> float:
        """The prompt side's share of a request's API-server CPU (0 to 1)."""
        total = self.cpu_ms(prompt_tokens, output_tokens)
        return self.prompt_us * prompt_tokens / 1e3 / total if total > 0 else 0.0

    def render_load_share(self, prompt_tokens: float, output_tokens: float) -> float:
        """What a render instance spends on a request, as a share of what the engine's API
        server spent on it before: the prompt side and the request's own HTTP and parsing."""
        total = self.cpu_ms(prompt_tokens, output_tokens)
        return (self.base_ms + self.prompt_us * prompt_tokens / 1e3) / total if total > 0 else 0.0


# `make bench-frontend` on 2026-12-04: vLLM 0.32's CPU build, the tiny Llama, output streamed.
# Absolute figures move with the CPU; the forecast uses only their ratios.
VLLM_API_SERVER = FrontendCost(base_ms=2.1, prompt_us=2.9, output_us=297.0)


# The prompt side's least share of a hot frontend's CPU that makes a render tier worth a restart
RENDER_WORTH = 0.25
# A render instance sized to run at most half a core at the live load: room for a burst twice
# as big before it is the hot frontend instead.
RENDER_CORES_TARGET = 0.5
MAX_RENDER_INSTANCES = 16


def render_instances(busiest_cores: float, load_share: float, fronts: int) -> int:
    """Render instances for a tier that takes the prompt side off `fronts` engine API servers
    (the decode or colocated instances: each request is tokenized at one of them, and again at
    a prefill, which the tier makes unnecessary), the busiest running `busiest_cores`, each
    render instance at most RENDER_CORES_TARGET (`load_share`: FrontendCost.render_load_share)."""
    taken = max(0.0, busiest_cores) * max(0.0, load_share) * max(1, fronts)
    return min(MAX_RENDER_INSTANCES, max(1, math.ceil(taken / RENDER_CORES_TARGET - 1e-9)))


def busiest_after(
    busiest_cores: float, prompt_share: float, load_share: float, fronts: int, renders: int
) -> float:
    """The busiest frontend after the tier: an engine's API server keeps all but the prompt
    side (the streaming), a render instance carries its share of every front's requests."""
    kept = busiest_cores * (1 - prompt_share)
    rendered = busiest_cores * load_share * max(1, fronts) / max(1, renders)
    return max(kept, rendered)
