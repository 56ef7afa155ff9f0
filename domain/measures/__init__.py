"""The measurements every path shares: latency buckets, vLLM's metric families, SLOs, TTFT
parts, per-request metrics, engine phases, and what counts as evidence."""
