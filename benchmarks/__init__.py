"""Our own timing benchmarks (`make bench-*`), the chaos campaign (`make chaos`) and the soak:
figures as ratios against a baseline measured in the same run.

Rooms: `chaos/` (faults on real processes under load), `soak/` (RSS and fds under load),
`proxy/` (the proxy's CPU and added latency against baselines), `measure/` (pdctl bench
against vLLM's own client), `frontend/` (the API server's CPU and the render tier)."""
