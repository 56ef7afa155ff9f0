"""`make bench-proxy`: what each PD proxy costs, at the same offered load on the same stand-ins.

One run, one machine: NIXL prefill and decode stand-ins (tiny model, so the engine is not the
bottleneck) and a colocated stand-in, all pinned with the load generator to one core; each proxy
pinned alone to the other core. Rows:
- direct: `pdctl bench` straight to the colocated stand-in (the floor: no proxy, no hand-off);
- pdctl, vllm-router, baseline (FastAPI + httpx, like vLLM's NIXL example proxy): NIXL PD;
- pdctl / vllm-router over the colocated stand-in: the cost of the hop alone;
- pdctl no-parts: pdctl with its TTFT breakdown off (`--no-ttft-parts`): the breakdown's cost
  as the CPU/pdctl ratio;
- pdctl canary: pdctl with an admin token, every request marked a canary with it
  (`X-Pdctl-Canary`): what a canary request costs against an ordinary one. The check every
  request pays (connector/canary.mark) is timed apart, against pdctl's CPU per request.
Each path's round runs beside a direct round (the order alternating by round, both with the
round's seed), and its added TTFT is the median of the pairs' differences at p50, and at p99
its pooled rounds against all direct runs pooled (benchmarks/proxy/report.py says why).
Per proxy: CPU-seconds per 1,000 streamed tokens (utime + stime of the proxy process from
/proc/<pid>/stat around the measured run), TTFT p50 / p99 added over `direct`, and ratios to
pdctl; and tokens per second per proxy core at saturation (benchmarks/proxy/saturation.py: wrk
through each PD proxy to a fixed SSE upstream). Environment: BENCH_PROXY_PROMPTS,
BENCH_PROXY_RATE, BENCH_PROXY_CONCURRENCY, BENCH_PROXY_ROUNDS, BENCH_PROXY_SAT_SECONDS;
BENCH_PROXY_BEFORE=/other/checkout/pdctl.py adds a "pdctl before" row (another pdctl's proxy,
same run, same stand-ins: a change's cost as a ratio), BENCH_PROXY_ONLY=name,name keeps only
those rows (and skips the saturation run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiohttp.test_utils import make_mocked_request

from benchmarks.proxy import saturation as proxy_saturation
from benchmarks.proxy.procs import (
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
from benchmarks.proxy.report import (
    CANARY,
    Row,
    against_direct,
    answered_ttfts,
    combine,
    pair,
    ratios,
    table,
)
from connector.dispatch import canary
from harness.processes import finally_on_sigterm

CONCURRENCY = int(os.environ.get("BENCH_PROXY_CONCURRENCY", "50"))
PROMPTS = int(os.environ.get("BENCH_PROXY_PROMPTS", "200"))
RATE = os.environ.get("BENCH_PROXY_RATE", "60")
ROUNDS = int(os.environ.get("BENCH_PROXY_ROUNDS", "3"))
BEFORE = os.environ.get("BENCH_PROXY_BEFORE")
ONLY = [n.strip() for n in os.environ.get("BENCH_PROXY_ONLY", "").split(",") if n.strip()]
INPUT_LEN, OUTPUT_LEN = 128, 64
CANARY_TOKEN = "bench-proxy-canary-token"


def bench(
    url: str, logs: Path, name: str, prompts: int, headers: tuple[str, ...] = (), seed: int = 0
) -> dict:
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
                "--seed",
                str(seed),
                "--result-json",
                str(out),
                "--save-requests",
                "--quiet",
                "--timeout",
                "60",
                *(arg for h in headers for arg in ("--header", h)),
            ),
        ],
        cwd=ROOT,
        check=True,
        timeout=300,
        stdout=subprocess.DEVNULL,
    )
    return json.loads(out.read_text())


def measure(
    name: str,
    url: str,
    logs: Path,
    proxy: Server | None,
    headers: tuple[str, ...] = (),
    seed: int = 0,
) -> Row:
    before = proxy.cpu_seconds() if proxy else None
    result = bench(url, logs, name, PROMPTS, headers, seed)
    cpu = proxy.cpu_seconds() - before if proxy and before is not None else None
    return Row(name, result, cpu, ttfts=answered_ttfts(result))


def paired_round(
    name: str, i: int, urls: dict[str, str], logs: Path, server: Server
) -> tuple[Row, Row]:
    """Round i of a path and the direct round beside it (direct first in even rounds), both
    with seed i: the same prompts at the same times."""
    headers = (f"{canary.HEADER}={CANARY_TOKEN}",) if name == CANARY else ()
    runs: dict[str, Row] = {}
    for which in ("direct", name) if i % 2 == 0 else (name, "direct"):
        proxy = server if which == name else None
        run_headers = headers if which == name else ()
        runs[which] = measure(f"{which}-{name}-{i}", urls[which], logs, proxy, run_headers, i)
    path = runs[name]
    path.paired.append(pair(path.result, runs["direct"].result))
    return path, runs["direct"]


def check_seconds(n: int = 200_000) -> float:
    """CPU-seconds of the canary check on one ordinary request's headers (as `pdctl bench`
    sends them), the least of three timings of n checks each."""
    headers = {
        "Host": "127.0.0.1:8000",
        "User-Agent": "Python/3.11 aiohttp/3",
        "Accept": "*/*",
        "Accept-Encoding": "gzip, deflate",
        "Content-Type": "application/json",
        "X-Pdctl-Ttft-Parts": "1",
        "Content-Length": "1000",
    }
    request = make_mocked_request("POST", "/v1/completions", headers=headers)
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(n):
            canary.mark(request.headers, CANARY_TOKEN)
        best = min(best, time.process_time() - start)
    return best / n


def main() -> None:
    finally_on_sigterm()  # an interrupted run left its vllm-router processes behind
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
    print(ratios(rows, check_seconds()))
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
    # the canary's cost: every request marked with the proxy's admin token
    proxies[CANARY] = lambda port: pdctl(
        "proxy",
        *("--port", str(port), "--registry-port", "-1", "--admin-token", CANARY_TOKEN),
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
        # Rounds interleave the paths so that a noisy neighbour hurts them all alike, and each
        # path's round runs beside a direct one (alternating which goes first): its added TTFT
        # is read against the direct run next to it, not one taken at another moment.
        rows: dict[str, list[Row]] = {n: [] for n in servers}
        for i in range(ROUNDS):
            for name, server in servers.items():
                if server is None:
                    continue
                path, direct = paired_round(name, i, urls, logs, server)
                rows[name].append(path)
                rows["direct"].append(direct)
    finally:
        for server in servers.values():
            if server is not None:
                server.stop()
    combined = [combine(name, runs) for name, runs in rows.items()]
    against_direct(combined)
    return combined


if __name__ == "__main__":
    main()
