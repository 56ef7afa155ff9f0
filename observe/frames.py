"""The live frame: what the dashboard receives for one deployment, once a second, over its
websocket (`/ws/deployments/{name}`), and what the history store keeps (downsampled).

This module is the contract between observe/ (which builds frames) and the pages (which
draw them). Times are seconds unless a key says `_ms`. Figures from the stand-in carry
`simulated: true`; figures computed rather than read carry a `source` saying how.

Frame = {
  "type": "frame",
  "deployment": str,
  "ts": float,                       # epoch seconds of the scrape
  "window": "10s" | "1m" | "5m",     # the window the histograms and rates cover
                                     # (chosen by the socket's ?window=, default "1m")
  "simulated": bool,                 # engine is the stand-in
  "slo": {"ttft_ms": float|None, "itl_ms": float|None, "itl_stat": "mean"|"p99"|"max"},
  "ttft": Histogram,                 # client-side, from the proxy (pdctl_proxy_ttft_seconds)
  "itl": Histogram,                  # client-side, from the proxy (pdctl_proxy_itl_seconds)
  "engine_ttft": Histogram | None,   # vllm:time_to_first_token_seconds summed over the decode
                                     # and colocated instances that answered (None: none did)
  "engine_itl": Histogram | None,    # vllm:inter_token_latency_seconds, same instances
  "slo_attainment": float | None,    # share of finished requests meeting every target
  "request_goodput": float | None,   # requests meeting every target per second
  "request_rate": float | None,      # finished requests per second at the proxy
  "outcomes": {"ok": float, "failed": float, "rejected": float},  # per second
  "kv": {
    "bytes_per_s": float | None,     # KV moved between instances
    "source": "nixl" | "derived" | None,   # derived = external prompt tokens x KV bytes/token
    "xfer_p50_ms": float | None, "xfer_p99_ms": float | None,     # nixl only
  },
  "running": int, "waiting": int,    # summed over engine instances
  "kv_cache_usage": float | None,    # max over instances, 0..1
  "multi_turn_share": float | None,  # chat requests carrying an earlier answer, of all chat
                                     # requests admitted (None: none; completions cannot say)
  "arrivals": {                      # client requests arriving at the proxy (all None: it
                                     # does not export pdctl_proxy_arrival_gap*)
    "per_s": float | None,           # arrivals per second (offered, finished or not)
    "gaps": int | None,              # gaps between consecutive arrivals, ending in the window
    "burstiness": float | None,      # gamma shape of those gaps, mean^2 / variance (1 = Poisson,
                                     # < 1 burstier; None: fewer than 20 gaps, or no spread).
                                     # The gap ending the window's first arrival counts whole,
                                     # so load that starts after an idle spell reads bursty
  },
  "interference": {                  # from the proxy (connector/interference.py)
    "spikes_per_s": float | None,    # token gaps above twice their request's median
    "at_prefill_share": float | None,  # of those, ended as another request's prefill
                                     # finished on the same instance (0.0: no spikes)
  },
  "engines": {                       # the engines' own counters over the window
    "prompt_tokens_per_request": float | None,  # vllm:prompt_tokens / vllm:request_success
                                     # on the prefill and colocated instances
    "prefix_hit_rate": float | None,  # vllm:prefix_cache_hits / _queries, same instances
    "cpu_cores_max": float | None,   # process_cpu_seconds_total rate of the busiest
                                     # instance's serving process (vLLM's API server)
  },
  "instances": [ {"name": str, "role": str, "state": str, "url": str, "mode": str|None,
                  "up": bool, "running": int, "waiting": int, "kv_cache_usage": float|None,
                  "loop_lag_s": float|None} ],
  "proxy": {"up": bool, "in_flight": int, "held": int, "loop_lag_s": float|None},
  "windows": {"10s": Headline, "1m": Headline, "5m": Headline},   # every window's headline
}
Histogram = {
  "buckets": [[upper_bound_seconds, count_in_window], ...],   # non-cumulative, +Inf last,
                                     # its bound as null (JSON has no Infinity); [] when absent
  "count": float, "p50": float|None, "p90": float|None, "p99": float|None,   # seconds
}
Headline = {"ttft_count", "ttft_p50", "ttft_p90", "ttft_p99", "itl_count", "itl_p50",
            "itl_p90", "itl_p99", "slo_attainment", "request_goodput", "request_rate",
            "kv_bytes_per_s"}    # flat, the same meanings as above (percentiles in seconds)
Point = {"ts": float, **Headline of the 10s window, "running": int, "waiting": int,
         "kv_cache_usage": float|None}   # one per deployment per history_step_s (5 s)

The websocket sends, in order: {"type": "history", "deployment", "window", "points": [Point,
...]} (the last 30 min, oldest first), the latest frame if there is one, then a frame every
scrape (1 s) and {"type": "event", "id", "ts", "actor", "kind", "deployment", "message",
"detail"} (as /api/events) whenever one is recorded for the deployment. Query: `window`
(10s | 1m | 5m), `token` (or the session cookie). Close codes: 4401 no valid token, 4404 no
such deployment, 4400 bad window, 1013 too many live sockets. GET
/api/deployments/{name}/history?window=1h gives {"deployment", "window", "points": [Point]}.
"""

from __future__ import annotations

from typing import Any, TypedDict


class Histogram(TypedDict):
    buckets: list[list[float]]
    count: float
    p50: float | None
    p90: float | None
    p99: float | None


Frame = dict[str, Any]  # the shape above; kept a plain dict so that it serializes as is

WINDOWS = ("10s", "1m", "5m")
WINDOW_SECONDS = {"10s": 10.0, "1m": 60.0, "5m": 300.0}
