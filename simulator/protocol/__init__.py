"""OpenAI-compatible request parsing and response shapes, as vLLM's API server writes them, and the
render tier's shapes."""
