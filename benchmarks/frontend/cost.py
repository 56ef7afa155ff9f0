"""Pure: vLLM's API server CPU per request split into a fixed part, a part per prompt token
(parsing, tokenizing: what a render tier takes over) and a part per output token (detokenizing,
building and writing each chunk: what stays on the engines' API servers), from runs of the
same server at a short and a long prompt and at one output token and many
(domain/engine/frontend_cost.py holds the split and what it says of a workload).

`split` takes runs as (prompt tokens, output tokens, CPU ms per request) means."""

from __future__ import annotations

from dataclasses import dataclass

from domain.engine.frontend_cost import FrontendCost


@dataclass(frozen=True)
class Run:
    prompt_tokens: float
    output_tokens: float
    cpu_ms: float  # the API server process's CPU per request


def split(short: Run, long_prompt: Run, long_output: Run) -> FrontendCost:
    """`long_prompt` differs from `short` in its prompt only, `long_output` in its output only
    (both at least one token longer): the differences give the per-token parts. A part that
    comes out negative (noise on a tiny difference) is 0."""
    if long_prompt.prompt_tokens <= short.prompt_tokens:
        raise ValueError("long_prompt must have the longer prompt")
    if long_output.output_tokens <= short.output_tokens:
        raise ValueError("long_output must have the longer output")
    per_prompt = (long_prompt.cpu_ms - short.cpu_ms) / (
        long_prompt.prompt_tokens - short.prompt_tokens
    )
    per_output = (long_output.cpu_ms - short.cpu_ms) / (
        long_output.output_tokens - short.output_tokens
    )
    per_prompt, per_output = max(0.0, per_prompt), max(0.0, per_output)
    base = short.cpu_ms - per_prompt * short.prompt_tokens - per_output * short.output_tokens
    return FrontendCost(max(0.0, base), per_prompt * 1e3, per_output * 1e3)
