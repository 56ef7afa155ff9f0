"""`make bench-proxy`: the proxy's CPU per token and added TTFT, against a direct run and a baseline
proxy."""
