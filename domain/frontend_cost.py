"""What vLLM's API server spends CPU on per request: a fixed part, a part per prompt token
(parsing, tokenizing: what a render tier takes over) and a part per output token (detokenizing,
building and writing each chunk: what stays on the engines' API servers). Pure."""

from __future__ import annotations

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

    def render_share(self, prompt_tokens: float, output_tokens: float) -> float:
        """The prompt side's share of a request's API-server CPU (0 to 1)."""
        total = self.cpu_ms(prompt_tokens, output_tokens)
        return self.prompt_us * prompt_tokens / 1e3 / total if total > 0 else 0.0


# `make bench-frontend` on 2026-12-04: vLLM 0.32's CPU build, the tiny Llama, output streamed.
# Absolute figures move with the CPU; the forecast uses only their ratios.
VLLM_API_SERVER = FrontendCost(base_ms=2.1, prompt_us=2.9, output_us=297.0)
