"""Tokens per second per proxy core at saturation, for `make bench-proxy`.

`wrk` (a Lua script POSTs a streamed completion) drives each NIXL PD proxy, pinned alone to its
core, in front of a fixed SSE upstream (benchmarks/proxy/sse_upstream.py: a prefill answer with
kv_transfer_params, and a stream of TOKENS events) on the load core with wrk. A Python load
generator could not saturate the Rust router; wrk can. Per proxy: tokens/s through it, the
share of a core it used, and tokens/s per proxy core (tokens / proxy CPU-seconds). The
`direct` row is wrk straight at the upstream: the ceiling of the load core; its upstream-core
share shows the upstream is not what limits a proxy that stays below it.
Environment: BENCH_PROXY_SAT_SECONDS (default 8), BENCH_PROXY_SAT_CONNECTIONS (256).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from benchmarks.proxy.procs import (
    LOAD_CORE,
    PROXY_CORE,
    Server,
    free_port,
    pd_proxies,
    pinned,
    router_installed,
)

TOKENS = 64
SECONDS = float(os.environ.get("BENCH_PROXY_SAT_SECONDS", "8"))
CONNECTIONS = int(os.environ.get("BENCH_PROXY_SAT_CONNECTIONS", "256"))
LUA = Path(__file__).with_name("saturation.lua")


@dataclass
class Saturation:
    name: str
    tokens_per_s: float
    proxy_cores: float | None  # proxy CPU-seconds per wall second
    upstream_cores: float  # the same for the upstream (on the load core, with wrk)
    errors: int

    @property
    def per_core(self) -> float | None:
        return self.tokens_per_s / self.proxy_cores if self.proxy_cores else None


def wrk(url: str, seconds: float) -> dict:
    out = subprocess.run(
        [
            *pinned(LOAD_CORE),
            *("wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds:g}s", "--timeout", "10s"),
            *("-s", str(LUA), url + "/v1/completions"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    ).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("SATURATION "))
    return json.loads(line.removeprefix("SATURATION "))


def events_streamed(url: str) -> int:
    """Token events in one streamed answer through `url`: each proxy must pass all TOKENS."""
    body = json.dumps({"model": "tiny", "prompt": "hi", "max_tokens": TOKENS, "stream": True})
    request = urllib.request.Request(
        url + "/v1/completions", body.encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.read().count(b'data: {"id"')


def measure(name: str, url: str, proxy: Server | None, upstream: Server) -> Saturation:
    wrk(url, 2)  # warm: connections, caches, the router's pools
    p0, u0, t0 = proxy.cpu_seconds() if proxy else 0.0, upstream.cpu_seconds(), time.monotonic()
    counts = wrk(url, SECONDS)
    wall = time.monotonic() - t0
    p1, u1 = proxy.cpu_seconds() if proxy else 0.0, upstream.cpu_seconds()
    duration = counts["duration_us"] / 1e6
    errors = sum(counts[k] for k in ("connect", "read", "write", "status", "timeout"))
    return Saturation(
        name,
        counts["requests"] * TOKENS / duration,
        (p1 - p0) / wall if proxy else None,
        (u1 - u0) / wall,
        errors,
    )


def run(logs: Path) -> dict[str, Saturation]:
    """Each PD proxy in turn at saturation, then the upstream alone; by name."""
    if not shutil.which("wrk"):
        print("saturation: wrk is not installed (make system-deps); skipped")
        return {}
    prefill_port, decode_port = free_port(), free_port()
    upstream = Server(
        "sse-upstream",
        [
            sys.executable,
            *("-m", "benchmarks.proxy.sse_upstream", f"{prefill_port},{decode_port}", str(TOKENS)),
        ],
        decode_port,
        LOAD_CORE,
        logs,
    )
    results: dict[str, Saturation] = {}
    try:
        upstream.wait_healthy(30)
        prefill = f"http://127.0.0.1:{prefill_port}"
        for name, argv in pd_proxies(prefill, upstream.url).items():
            if name == "vllm-router" and not router_installed():
                continue
            port = free_port()
            proxy = Server(f"{name}-saturation", argv(port), port, PROXY_CORE, logs)
            try:
                proxy.wait_healthy(120)
                if (n := events_streamed(proxy.url)) != TOKENS:
                    raise RuntimeError(f"{name} passed {n} of {TOKENS} token events")
                results[name] = measure(name, proxy.url, proxy, upstream)
            finally:
                proxy.stop()
        results["upstream alone"] = measure("upstream alone", upstream.url, None, upstream)
    finally:
        upstream.stop()
    return results


def table(results: dict[str, Saturation]) -> str:
    lines = [
        f"saturation: wrk, {CONNECTIONS} connections, {SECONDS:g} s, {TOKENS} tokens a stream; "
        f"proxy alone on core {PROXY_CORE}, upstream and wrk on core {LOAD_CORE}",
        f"{'path':<22} {'tok/s':>8} {'proxy cores':>11} {'tok/s/core':>10} "
        f"{'upstream cores':>14} {'errors':>6}",
    ]
    for s in results.values():
        cores = "-" if s.proxy_cores is None else f"{s.proxy_cores:.2f}"
        per_core = "-" if s.per_core is None else f"{s.per_core:.0f}"
        lines.append(
            f"{s.name:<22} {s.tokens_per_s:8.0f} {cores:>11} {per_core:>10} "
            f"{s.upstream_cores:14.2f} {s.errors:>6}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import tempfile

    print(table(run(Path(tempfile.mkdtemp(prefix="proxy-saturation-")))))
