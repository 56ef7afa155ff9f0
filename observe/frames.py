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
  "simulated": bool,                 # engine is the stand-in
  "slo": {"ttft_ms": float|None, "itl_ms": float|None, "itl_stat": "mean"|"p99"|"max"},
  "ttft": Histogram,                 # client-side, from the proxy (pdctl_proxy_ttft_seconds)
  "itl": Histogram,                  # client-side, from the proxy (pdctl_proxy_itl_seconds)
  "engine_ttft": Histogram | None,   # vllm:time_to_first_token_seconds summed over instances
  "engine_itl": Histogram | None,    # vllm:inter_token_latency_seconds
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
  "instances": [ {"name": str, "role": str, "state": str, "url": str, "mode": str|None,
                  "up": bool, "running": int, "waiting": int, "kv_cache_usage": float|None,
                  "loop_lag_s": float|None} ],
  "proxy": {"up": bool, "in_flight": int, "held": int, "loop_lag_s": float|None},
}
Histogram = {
  "buckets": [[upper_bound_seconds, count_in_window], ...],   # non-cumulative, +Inf last
  "count": float, "p50": float|None, "p90": float|None, "p99": float|None,   # seconds
}
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
