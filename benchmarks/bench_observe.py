"""Observe-path figures: how long a finished request takes to show in the live frames (median),
and the CPU `pdctl serve` spends while it scrapes 4 stand-in instances and a proxy with 1 and
with 10 websocket subscribers. Run: `.venv/bin/python -m benchmarks.bench_observe`."""

from __future__ import annotations

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
from harness.processes import Process, free_port, http_post, port_range

TICKS = os.sysconf("SC_CLK_TCK")
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


def main() -> None:
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


if __name__ == "__main__":
    main()
