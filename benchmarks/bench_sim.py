"""`make bench-sim`: start time, RSS and streamed tokens/s of one `pdctl sim` on one core.

The server is pinned to core 0 with taskset, the load (this process) to core 1. The baseline,
measured in the same run and the same way, is a bare aiohttp SSE server with no engine
(benchmarks/proxy/sse_floor.py): the ratio says what the engine model costs on top of HTTP.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from harness.processes import free_port, http_get

ROOT = Path(__file__).resolve().parent.parent
STREAMS, MAX_TOKENS, DURATION_S = 64, 256, 8.0


def _pinned(args: list[str], core: int) -> subprocess.Popen:
    prefix = ["taskset", "-c", str(core)] if shutil.which("taskset") else []
    return subprocess.Popen(
        [*prefix, sys.executable, *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if http_get(url + "/health", timeout=0.5)[0] == 200:
                return time.perf_counter() - start
        except OSError:
            pass
        time.sleep(0.01)
    raise TimeoutError(url)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _load(url: str) -> tuple[int, float]:
    tokens = 0
    deadline = time.perf_counter() + DURATION_S
    body = {
        "model": "tiny",
        "prompt": "a b c d e f g h",
        "max_tokens": MAX_TOKENS,
        "stream": True,
        "ignore_eos": True,
    }

    async def stream(session: aiohttp.ClientSession) -> None:
        nonlocal tokens
        while time.perf_counter() < deadline:
            async with session.post(url + "/v1/completions", json=body) as resp:
                async for line in resp.content:
                    if line.startswith(b"data: {"):
                        tokens += 1
                    if time.perf_counter() > deadline + 5:
                        break

    start = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=STREAMS)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.wait_for(
            asyncio.gather(*(stream(session) for _ in range(STREAMS))), DURATION_S + 30
        )
    return tokens, time.perf_counter() - start


def measure(args: list[str]) -> tuple[float, float, float]:
    port = free_port()
    proc = _pinned([*args, "--port", str(port)] if args[0] == "pdctl.py" else [*args, str(port)], 0)
    try:
        url = f"http://127.0.0.1:{port}"
        started = _wait_healthy(url, proc)
        tokens, elapsed = asyncio.run(_load(url))
        return started, _rss_mb(proc.pid), tokens / elapsed
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    print(
        f"one server on core 0, load on core 1: {STREAMS} streams x {MAX_TOKENS} tokens, "
        f"{DURATION_S:.0f} s"
    )
    floor = measure(["-m", "benchmarks.proxy.sse_floor"])
    engine = measure(["pdctl.py", "sim"])
    print(f"{'server':<28}{'start s':>9}{'RSS MB':>9}{'tokens/s':>11}{'x floor':>9}")
    for name, (start, rss, rate) in (
        ("bare aiohttp SSE (floor)", floor),
        ("pdctl sim (tiny model)", engine),
    ):
        print(f"{name:<28}{start:>9.2f}{rss:>9.0f}{rate:>11.0f}{rate / floor[2]:>9.2f}")
    print("aims: start < 2 s, RSS < 150 MB, >= 5,000 tokens/s")


if __name__ == "__main__":
    main()
