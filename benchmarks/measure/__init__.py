"""`make bench-measure`: pdctl bench and vLLM's own `vllm bench serve` against the same
stand-ins."""
