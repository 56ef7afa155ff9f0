"""`python -m benchmarks.frontend.render_tier`: the render tier's CPU per request, against the
engines'.

One NIXL stand-in pair (prefill, decode), one `pdctl sim --render`, and two `pdctl proxy`s over
the same engines: one with the render tier (--render), one without. The same bounded workload
(a count of streamed completions at a fixed concurrency, stopped early at a time limit; loopback
only) goes through each in turn. CPU is read from /proc/<pid>/stat (utime + stime) of each
process before and after each run, so it is the processes' own, not a model.

Printed: the render tier's CPU seconds per request; the engines' (prefill + decode processes:
on the stand-in their API server and its simulated scheduler in one process) per request with
and without the render tier; the ratio render / engines measured in the same run; the proxy's
per request on each path (the render call is its extra leg); and how many completions differed
between the two paths (0 expected: the render tier changes no text).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import aiohttp

from benchmarks.proxy.procs import cpu_seconds as pid_cpu_seconds
from harness.processes import Process, running, sim
from harness.stack import nixl_sim, proxy


def cpu_seconds(proc: Process) -> float:
    """utime + stime of the process, from /proc."""
    return pid_cpu_seconds(proc.proc.pid)


def prompt(i: int, words: int) -> str:
    return " ".join(f"w{(i * 7 + k) % 97}" for k in range(words))


async def one(session: aiohttp.ClientSession, url: str, i: int, args: argparse.Namespace) -> str:
    chat = args.endpoint == "chat"
    body = {
        "model": "tiny",
        "max_tokens": args.output_len,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    if chat:
        body["messages"] = [{"role": "user", "content": prompt(i, args.input_len)}]
    else:
        body["prompt"] = prompt(i, args.input_len)
    text = []
    path = "/v1/chat/completions" if chat else "/v1/completions"
    async with session.post(url + path, json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {(await r.read())[:200]!r}")
        async for line in r.content:
            if line.startswith(b"data: {"):
                event = json.loads(line[6:])
                for c in event.get("choices") or ():
                    text.append(c["delta"].get("content") or "" if chat else c["text"])
    return "".join(text)


async def load(url: str, args: argparse.Namespace) -> dict[int, str]:
    """Up to args.requests requests, args.concurrency at a time, none started after the limit."""
    deadline = time.monotonic() + args.seconds
    texts: dict[int, str] = {}
    queue = iter(range(args.requests))
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            for i in queue:
                if time.monotonic() > deadline:
                    return
                texts[i] = await one(session, url, i, args)

        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    return texts


def measure(url: str, procs: list[Process], args: argparse.Namespace) -> tuple[dict, list]:
    before = [cpu_seconds(p) for p in procs]
    texts = asyncio.run(load(url, args))
    return texts, [cpu_seconds(p) - b for p, b in zip(procs, before, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0, help="Time limit per path.")
    parser.add_argument("--input-len", type=int, default=256, help="Prompt words (tokens).")
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        prefill = nixl_sim(tmp, "prefill", "kv_producer")
        decode = nixl_sim(tmp, "decode", "kv_consumer")
        render = sim(tmp, "render", "tiny", "--render")
        with running(prefill, decode, render):
            legs = ["--connector", "nixl", "--mode", "read", "--prefill", prefill.url]
            legs += ["--decode", decode.url]
            plain = proxy(tmp, "plain", *legs)
            rendered = proxy(tmp, "rendered", *legs, "--render", render.url)
            with running(plain, rendered):
                asyncio.run(load(rendered.url, argparse.Namespace(**{**vars(args), "requests": 4})))
                procs = [prefill, decode, render]
                texts_plain, cpu_plain = measure(plain.url, [*procs, plain], args)
                texts_render, cpu_render = measure(rendered.url, [*procs, rendered], args)
    report(args, texts_plain, cpu_plain, texts_render, cpu_render)


def report(args, texts_plain, cpu_plain, texts_render, cpu_render) -> None:
    n_plain, n_render = len(texts_plain), len(texts_render)
    common = texts_plain.keys() & texts_render.keys()
    differ = sum(texts_plain[i] != texts_render[i] for i in common)
    engines_plain = (cpu_plain[0] + cpu_plain[1]) / n_plain
    engines_render = (cpu_render[0] + cpu_render[1]) / n_render
    render_per = cpu_render[2] / n_render
    print(
        f"workload: {args.endpoint}, {args.input_len}-token prompts, {args.output_len} streamed "
        f"tokens, "
        f"concurrency {args.concurrency}; {n_plain} requests without the render tier, "
        f"{n_render} with it"
    )
    print(f"render tier CPU per request:            {render_per * 1000:.2f} ms")
    print(f"engines' CPU per request, render tier:  {engines_render * 1000:.2f} ms")
    print(f"engines' CPU per request, no render:    {engines_plain * 1000:.2f} ms")
    print(f"render / engines (same run, with it):   {render_per / engines_render:.3f}")
    print(f"proxy CPU per request, render tier:     {cpu_render[3] / n_render * 1000:.2f} ms")
    print(f"proxy CPU per request, no render:       {cpu_plain[3] / n_plain * 1000:.2f} ms")
    print(f"render tier CPU idle in the no-render run: {cpu_plain[2] * 1000:.0f} ms in all")
    print(f"completions that differ between the paths: {differ} of {len(common)}")


if __name__ == "__main__":
    main()
