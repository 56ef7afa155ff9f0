"""`make bench-proxy`: what each PD proxy costs, at the same offered load on the same stand-ins.

One run, one machine: NIXL prefill and decode stand-ins (tiny model, so the engine is not the
bottleneck) and a colocated stand-in, all pinned with the load generator to one core; each proxy
pinned alone to the other core. Rows:
- direct: `pdctl bench` straight to the colocated stand-in (the floor: no proxy, no hand-off);
- pdctl, vllm-router, baseline (FastAPI + httpx, like vLLM's NIXL example proxy): NIXL PD;
- pdctl / vllm-router over the colocated stand-in: the cost of the hop alone;
- pdctl no-parts: pdctl with its TTFT breakdown off (`--no-ttft-parts`): the breakdown's cost
  as the CPU/pdctl ratio.
Per proxy: CPU-seconds per 1,000 streamed tokens (utime + stime of the proxy process from
/proc/<pid>/stat around the measured run), TTFT p50 / p99 added over `direct`, and ratios to
pdctl; and tokens per second per proxy core at saturation (benchmarks/proxy_saturation.py: wrk
through each PD proxy to a fixed SSE upstream). Environment: BENCH_PROXY_PROMPTS,
BENCH_PROXY_RATE, BENCH_PROXY_CONCURRENCY, BENCH_PROXY_ROUNDS, BENCH_PROXY_SAT_SECONDS;
BENCH_PROXY_BEFORE=/other/checkout/pdctl.py adds a "pdctl before" row (another pdctl's proxy,
same run, same stand-ins: a change's cost as a ratio), BENCH_PROXY_ONLY=name,name keeps only
those rows (and skips the saturation run).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks import proxy_saturation
from benchmarks.proxy_procs import (
    LOAD_CORE,
    PROXY_CORE,
    ROOT,
    Server,
    free_port,
    pd_proxies,
    pdctl,
    pinned,
    router_binary,
    router_installed,
)

CONCURRENCY = int(os.environ.get("BENCH_PROXY_CONCURRENCY", "50"))
PROMPTS = int(os.environ.get("BENCH_PROXY_PROMPTS", "200"))
RATE = os.environ.get("BENCH_PROXY_RATE", "60")
ROUNDS = int(os.environ.get("BENCH_PROXY_ROUNDS", "3"))
BEFORE = os.environ.get("BENCH_PROXY_BEFORE")
ONLY = [n.strip() for n in os.environ.get("BENCH_PROXY_ONLY", "").split(",") if n.strip()]
INPUT_LEN, OUTPUT_LEN = 128, 64


def bench(url: str, logs: Path, name: str, prompts: int) -> dict:
    out = logs / f"{name}.json"
    subprocess.run(
        [
            *pinned(LOAD_CORE),
            *pdctl(
                "bench",
                "--base-url",
                url,
                "--request-rate",
                RATE,
                "--max-concurrency",
                str(CONCURRENCY),
                "--num-prompts",
                str(prompts),
                "--input-len",
                str(INPUT_LEN),
                "--output-len",
                str(OUTPUT_LEN),
                "--result-json",
                str(out),
                "--quiet",
                "--timeout",
                "60",
            ),
        ],
        cwd=ROOT,
        check=True,
        timeout=300,
        stdout=subprocess.DEVNULL,
    )
    return json.loads(out.read_text())


@dataclass
class Row:
    name: str
    result: dict
    cpu: float | None  # proxy CPU-seconds over the measured run

    @property
    def cpu_per_1k(self) -> float | None:
        tokens = self.result["total_output_tokens"]
        return None if self.cpu is None or not tokens else self.cpu / tokens * 1000


def measure(name: str, url: str, logs: Path, proxy: Server | None) -> Row:
    before = proxy.cpu_seconds() if proxy else None
    result = bench(url, logs, name, PROMPTS)
    cpu = proxy.cpu_seconds() - before if proxy and before is not None else None
    return Row(name, result, cpu)


def main() -> None:
    logs = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    nixl = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    engines = [
        Server("colocated", pdctl("sim", "--port", str(p := free_port())), p, LOAD_CORE, logs),
        Server(
            "prefill",
            pdctl("sim", "--port", str(q := free_port()), "--kv-transfer-config", json.dumps(nixl)),
            q,
            LOAD_CORE,
            logs,
            env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())},
        ),
        Server(
            "decode",
            pdctl("sim", "--port", str(r := free_port()), "--kv-transfer-config", json.dumps(nixl)),
            r,
            LOAD_CORE,
            logs,
            env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())},
        ),
    ]
    try:
        colocated, prefill, decode = (e.wait_healthy(120) for e in engines)
        rows = run_all(logs, colocated, prefill, decode)
    finally:
        for e in engines:
            e.stop()
    saturation = proxy_saturation.run(logs) if not ONLY else {}
    print(table(rows, saturation))
    if saturation:
        print(proxy_saturation.table(saturation))


def run_all(logs: Path, colocated: Server, prefill: Server, decode: Server) -> list[Row]:
    proxies = {
        **pd_proxies(prefill.url, decode.url),
        "pdctl colocated": lambda port: pdctl(
            "proxy",
            "--port",
            str(port),
            "--registry-port",
            "-1",
            "--mode",
            "colocated",
            "--instance",
            colocated.url,
        ),
        "vllm-router colocated": lambda port: [
            router_binary(),
            "--worker-urls",
            colocated.url,
            "--policy",
            "round_robin",
            "--port",
            str(port),
            "--prometheus-port",
            str(free_port()),
            "--log-level",
            "warning",
        ],
    }
    print(
        f"bench-proxy: {CONCURRENCY} streams max, {RATE} req/s offered, {PROMPTS} "
        f"requests of {INPUT_LEN} in / {OUTPUT_LEN} out, {ROUNDS} rounds; proxies on core "
        f"{PROXY_CORE}, engines and load on core {LOAD_CORE}; logs in {logs}",
        flush=True,
    )
    # the TTFT breakdown's cost: the same proxy with it off (pdctl bench asks for the parts,
    # so the "pdctl" row pays for the split and the comment after [DONE] on every request)
    proxies["pdctl no-parts"] = lambda port: pdctl(
        "proxy",
        *("--port", str(port), "--registry-port", "-1", "--no-ttft-parts"),
        *("--prefill", prefill.url, "--decode", decode.url),
    )
    if BEFORE:
        proxies["pdctl before"] = lambda port: [
            sys.executable,
            BEFORE,
            *("proxy", "--port", str(port), "--registry-port", "-1"),
            *("--prefill", prefill.url, "--decode", decode.url),
        ]
    if ONLY:
        proxies = {n: argv for n, argv in proxies.items() if n in ONLY}
    servers: dict[str, Server | None] = {"direct": None}
    try:
        for name, argv in proxies.items():
            if name.startswith("vllm-router") and not router_installed():
                print(f"{name}: vllm-router is not installed; skipped")
                continue
            port = free_port()
            servers[name] = Server(name.replace(" ", "-"), argv(port), port, PROXY_CORE, logs)
        for server in servers.values():
            if server is not None:
                server.wait_healthy(120)
        urls = {n: colocated.url if s is None else s.url for n, s in servers.items()}
        for name, url in urls.items():
            bench(url, logs, f"{name}-warmup", max(CONCURRENCY, PROMPTS // 4))
        # Rounds interleave the paths so that a noisy neighbour hurts them all alike.
        rows: dict[str, list[Row]] = {n: [] for n in servers}
        for i in range(ROUNDS):
            for name, server in servers.items():
                rows[name].append(measure(f"{name}-{i}", urls[name], logs, server))
    finally:
        for server in servers.values():
            if server is not None:
                server.stop()
    return [combine(name, runs) for name, runs in rows.items()]


def combine(name: str, runs: list[Row]) -> Row:
    """Medians of the rounds' percentiles; CPU and tokens summed over the rounds."""
    result = dict(runs[0].result)
    for key in ("median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "output_throughput"):
        result[key] = statistics.median(r.result[key] for r in runs)
    for key in ("completed", "failed", "total_output_tokens"):
        result[key] = sum(r.result[key] for r in runs)
    cpu = None if runs[0].cpu is None else sum(r.cpu or 0.0 for r in runs)
    return Row(name, result, cpu)


def table(rows: list[Row], saturation: dict[str, proxy_saturation.Saturation]) -> str:
    direct = rows[0].result
    ours = next((r for r in rows if r.name == "pdctl"), None)
    lines = [
        f"{'path':<22} {'ok/fail':>8} {'tok/s':>7} {'CPU-s/1k tok':>12} {'TTFT p50':>9} "
        f"{'TTFT p99':>9} {'+p50 ms':>8} {'+p99 ms':>8} {'ITL p50':>8} {'CPU/pdctl':>9} "
        f"{'sat tok/s/core':>14}",
    ]
    for row in rows:
        r = row.result
        added50 = r["median_ttft_ms"] - direct["median_ttft_ms"]
        added99 = r["p99_ttft_ms"] - direct["p99_ttft_ms"]
        cpu = row.cpu_per_1k
        ratio = f"{cpu / ours.cpu_per_1k:9.2f}" if cpu and ours and ours.cpu_per_1k else f"{'-':>9}"
        sat = saturation.get(row.name)
        per_core = f"{sat.per_core:.0f}" if sat and sat.per_core else "-"
        lines.append(
            f"{row.name:<22} {r['completed']:>4}/{r['failed']:<3} {r['output_throughput']:7.0f} "
            f"{'-' if cpu is None else f'{cpu:.4f}':>12} {r['median_ttft_ms']:9.2f} "
            f"{r['p99_ttft_ms']:9.2f} {'-' if row.name == 'direct' else f'{added50:.2f}':>8} "
            f"{'-' if row.name == 'direct' else f'{added99:.2f}':>8} "
            f"{r['median_itl_ms']:8.2f} {ratio} {per_core:>14}"
        )
    lines.append(
        "TTFT columns in ms; +p50/+p99: added over direct (colocated stand-in, no "
        "proxy); PD rows include the hand-off itself (prefill leg + KV pull + the "
        "decode's first step), the colocated rows only the hop. sat tok/s/core: tokens per "
        "second per proxy core at saturation (wrk through the proxy to a fixed SSE upstream)."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
