"""Observe-path figures: how long a finished request takes to show in the live frames (median),
the CPU `pdctl serve` spends while it scrapes 4 stand-in instances and a proxy with 1 and
with 10 websocket subscribers, and the time observe takes to parse one /metrics page (a NIXL
stand-in's, live, and real vLLM's saved ones) with the fast reader and with prometheus_client's
parser alone, in the same run. Run: `.venv/bin/python -m benchmarks.bench_observe [--only
parse|serve]`."""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from websockets.sync.client import connect

from benchmarks.control_plane import api, stop_and_wait, wait_running
from harness.processes import Process, free_port, http_post, port_range, running
from harness.stack import nixl_sim
from observe.build import tracked
from observe.metrics.samples import parse, parse_by_prometheus_client

TICKS = os.sysconf("SC_CLK_TCK")
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "vllm"
FLEET = 32  # instances scraped each second in bench_cluster's CPU figure
SPEC = {
    "name": "bench",
    "engine": "sim",
    "model": "tiny",
    "topology": "colocated",
    "groups": [{"name": "main", "role": "colocated", "count": 4}],
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def frames(ws) -> dict:
    while True:
        message = json.loads(ws.recv(timeout=10))
        if message["type"] == "frame":
            return message


def latency(ws_url: str, proxy: str, trials: int) -> list[float]:
    """Seconds from a request's last token leaving the proxy to a frame that counts it."""
    out = []
    with connect(ws_url) as ws:
        count = frames(ws)["ttft"]["count"]
        for _ in range(trials):
            time.sleep(random.uniform(0.3, 1.3))  # sample every phase of the scrape tick
            http_post(
                proxy + "/v1/completions", {"model": "tiny", "prompt": "x y", "max_tokens": 2}
            )
            done = time.monotonic()
            while (frame := frames(ws))["ttft"]["count"] <= count:
                pass
            out.append(time.monotonic() - done)
            count = frame["ttft"]["count"]
    return out


def cpu_with(ws_url: str, pid: int, subscribers: int, proxy: str, seconds: float) -> float:
    """Share of one core `pdctl serve` uses over `seconds` under light load."""
    stop = threading.Event()

    def reader() -> None:
        with connect(ws_url) as ws:
            while not stop.is_set():
                ws.recv(timeout=5)

    def load() -> None:
        while not stop.is_set():
            http_post(
                proxy + "/v1/completions", {"model": "tiny", "prompt": "x y", "max_tokens": 8}
            )
            time.sleep(0.2)

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(subscribers)]
    threads.append(threading.Thread(target=load, daemon=True))
    for t in threads:
        t.start()
    time.sleep(2.0)  # connected, history sent
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    share = (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    return share


def per_page(fn, text: str, rounds: int = 7, seconds: float = 0.3) -> float:
    """Median seconds `fn(text, keep=tracked)` takes, over `rounds` timed batches."""
    fn(text, keep=tracked)  # warm: the fast reader's caches fill on the first page
    batch = max(1, round(seconds / _timed(fn, text, 1)))
    return statistics.median(_timed(fn, text, batch) for _ in range(rounds))


def _timed(fn, text: str, n: int) -> float:
    began = time.perf_counter()
    for _ in range(n):
        fn(text, keep=tracked)
    return (time.perf_counter() - began) / n


def parse_figures() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-parse-"))
    stand_in = nixl_sim(tmp, "decode", "kv_consumer")
    with running(stand_in):
        body = {"model": "tiny", "prompt": "one two three", "max_tokens": 4}
        for _ in range(3):  # histograms with counts
            http_post(stand_in.url + "/v1/completions", body)
        pages = {"NIXL stand-in (live)": stand_in.metrics()}
    for name in ("prefill", "decode", "colocated"):
        pages[f"vLLM {name} (saved)"] = (FIXTURES / f"{name}_metrics.txt").read_text()
    print("observe's parse of one /metrics page, families observe keeps (median of 7 batches):")
    for name, text in pages.items():
        if parse(text, tracked) != parse_by_prometheus_client(text, tracked):
            raise SystemExit(f"{name}: the fast reader and prometheus_client disagree")
        old, new = per_page(parse_by_prometheus_client, text), per_page(parse, text)
        print(
            f"  {name}: {len(text) / 1000:.0f} KB, {text.count(chr(10))} lines: "
            f"prometheus_client {old * 1000:.2f} ms, fast reader {new * 1000:.3f} ms, "
            f"x{old / new:.0f}; {FLEET} pages a second: {FLEET * old:.1%} -> {FLEET * new:.1%} "
            "of a core"
        )


def serve_figures() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-observe-"))
    port = free_port()
    serve = Process(
        ["serve", "--port", str(port), "--db", str(tmp / "pdctl.db")],
        port,
        env={"PDCTL_RUNTIME_DIR": str(tmp / "runs"), "PDCTL_PORT_RANGE": port_range()},
        log_path=tmp / "serve.log",
    ).wait_healthy(30)
    base = serve.url
    try:
        status, created = api(base, "POST", "/deployments", SPEC)
        assert status == 201, created
        proxy = f"http://127.0.0.1:{created['ports']['proxy']}"
        api(base, "POST", "/deployments/bench/start")
        wait_running(base, "bench")
        ws_url = base.replace("http", "ws") + "/ws/deployments/bench?window=5m"
        lags = latency(ws_url, proxy, trials=20)
        idle = cpu_with(ws_url, serve.proc.pid, 0, proxy, 10.0)
        one = cpu_with(ws_url, serve.proc.pid, 1, proxy, 10.0)
        ten = cpu_with(ws_url, serve.proc.pid, 10, proxy, 10.0)
        print(
            f"request done -> frame counts it: median {statistics.median(lags) * 1000:.0f} ms,"
            f" p90 {statistics.quantiles(lags, n=10)[-1] * 1000:.0f} ms, "
            f"max {max(lags) * 1000:.0f} ms over {len(lags)} requests (scrape every 1 s)"
        )
        print(
            f"pdctl serve CPU, 4 instances + proxy scraped each second under light load: "
            f"0 subscribers {idle:.1%}, 1 subscriber {one:.1%}, 10 subscribers {ten:.1%} "
            f"of one core"
        )
    finally:
        stop_and_wait(base, "bench")
        serve.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("parse", "serve"))
    args = parser.parse_args()
    if args.only in (None, "parse"):
        parse_figures()
    if args.only in (None, "serve"):
        serve_figures()


if __name__ == "__main__":
    main()
