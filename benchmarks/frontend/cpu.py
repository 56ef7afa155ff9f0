"""`make bench-frontend`: what real vLLM's API server spends its CPU on, and so how much of it a
render tier could take.

One real `vllm serve` (the CPU build and the tiny Llama that `make test-vllm` sets up) on
loopback. vLLM runs its API server (HTTP, tokenizing, detokenizing, streaming) in the launched
process and its engine in a child; both are read from /proc (utime + stime) before and after
each workload, so the figures are the processes' own. Four bounded workloads at a fixed
concurrency, each with its own prompts: a short prompt and one output token; a long prompt and
one; a short prompt and 128 streamed; the same not streamed. Their differences split the API
server's CPU per request into a fixed part, a part per prompt token (what a render tier takes
over) and a part per output token (what stays on the engines' API servers)
(benchmarks/frontend/cost.py). Printed: each workload's row, the split, and the prompt side's
share of the API server's CPU for a few workload shapes. Environment: BENCH_FRONTEND_REQUESTS
(per workload, default 40).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from benchmarks.frontend.cost import Run, split
from benchmarks.measure.vllm_client import HOW_TO_GET_IT, tiny_llama, vllm_python
from benchmarks.proxy.procs import cpu_seconds
from harness.processes import free_port

REQUESTS = int(os.environ.get("BENCH_FRONTEND_REQUESTS", "40"))
CONCURRENCY = 4
START_TIMEOUT_S = 420.0
REQUEST_TIMEOUT_S = 120.0
WORDS = ("the", "cache", "block", "token", "layer", "prefill", "decode", "engine", "request")
SHORT_WORDS, LONG_WORDS, OUTPUT = 20, 600, 128  # 600 words: ~1,450 tiny-Llama tokens
SHAPES = ((8000, 16), (4000, 128), (1000, 256), (256, 1024))  # (prompt, output) tokens


def children(pid: int) -> list[int]:
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]


def prompt(seed: int, words: int) -> str:
    return " ".join(WORDS[(seed * 7 + k * 3 + k // 5) % len(WORDS)] for k in range(words))


def complete(port: int, text: str, max_tokens: int, stream: bool) -> dict:
    """One completion; its usage (the stream's last chunk carries it)."""
    body: dict = {"model": "tiny", "prompt": text, "max_tokens": max_tokens, "stream": stream}
    body |= {"ignore_eos": True, "temperature": 0}
    if stream:
        body["stream_options"] = {"include_usage": True}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:
        if not stream:
            return json.loads(answer.read())["usage"]
        usage = None
        for line in answer:
            if line.startswith(b"data: {") and (chunk := json.loads(line[6:])).get("usage"):
                usage = chunk["usage"]
        return usage or {}


def workload(port: int, api: int, engine: int, seeds: range, words: int, out: int, stream: bool):
    """(Run of the API server, engine CPU ms per request, wall s); every request must answer."""
    usages: list[dict] = []
    failures: list[str] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        for seed in seeds[offset::CONCURRENCY]:
            try:
                usage = complete(port, prompt(seed, words), out, stream)
            except Exception as exc:  # counted, then the run is refused
                with lock:
                    failures.append(f"{type(exc).__name__}: {exc}")
                continue
            with lock:
                usages.append(usage)

    api0, engine0, t0 = cpu_seconds(api), cpu_seconds(engine), time.monotonic()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(CONCURRENCY)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - t0
    if failures:
        raise SystemExit(f"bench-frontend: {len(failures)} requests failed: {failures[0]}")
    n = len(usages)
    run = Run(
        sum(u["prompt_tokens"] for u in usages) / n,
        sum(u["completion_tokens"] for u in usages) / n,
        (cpu_seconds(api) - api0) / n * 1e3,
    )
    return run, (cpu_seconds(engine) - engine0) / n * 1e3, wall


def serve(port: int, log: Path) -> subprocess.Popen:
    python, model = vllm_python(), tiny_llama()
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    argv += ["--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--max-model-len", "2048"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bench-frontend: vllm exited {proc.returncode}; see {log}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc
        except OSError:
            time.sleep(2)
    raise SystemExit(f"bench-frontend: vllm did not answer within {START_TIMEOUT_S:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def main() -> int:
    if vllm_python() is None or tiny_llama() is None:
        print(f"bench-frontend: skipped, no real-vLLM venv or tiny model: {HOW_TO_GET_IT}")
        return 0
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="pdctl-bench-frontend-")) / "vllm.log"
    proc = serve(port, log)
    try:
        engine = max(children(proc.pid), key=cpu_seconds)  # EngineCore: the busy child
        workload(port, proc.pid, engine, range(900, 908), SHORT_WORDS, 1, False)  # warm-up
        plan = {
            "short prompt, 1 token": (0, SHORT_WORDS, 1, False),
            "long prompt, 1 token": (1000, LONG_WORDS, 1, False),
            f"short prompt, {OUTPUT} streamed": (2000, SHORT_WORDS, OUTPUT, True),
            f"short prompt, {OUTPUT} not streamed": (3000, SHORT_WORDS, OUTPUT, False),
        }
        runs = {}
        print(
            "| workload | prompt tokens | output tokens | API server CPU ms/request "
            "| engine CPU ms/request | wall s |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        for name, (first, words, out, stream) in plan.items():
            seeds = range(first, first + REQUESTS)
            run, engine_ms, wall = workload(port, proc.pid, engine, seeds, words, out, stream)
            runs[name] = run
            print(
                f"| {name} | {run.prompt_tokens:.0f} | {run.output_tokens:.0f} "
                f"| {run.cpu_ms:.2f} | {engine_ms:.1f} | {wall:.1f} |"
            )
    finally:
        stop(proc)
    short, long_prompt = runs["short prompt, 1 token"], runs["long prompt, 1 token"]
    for label in ("streamed", "not streamed"):
        cost = split(short, long_prompt, runs[f"short prompt, {OUTPUT} {label}"])
        print(
            f"\nAPI server, output {label}: {cost.base_ms:.2f} ms per request + "
            f"{cost.prompt_us:.1f} us per prompt token + {cost.output_us:.0f} us per output "
            f"token ({cost.output_us / max(cost.prompt_us, 1e-9):.0f}x a prompt token)"
        )
        shares = ", ".join(f"{p} in / {o} out {cost.render_share(p, o):.0%}" for p, o in SHAPES)
        print(f"  prompt side (a render tier's to take) of the API server's CPU: {shares}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
