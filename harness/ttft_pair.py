"""A MoRIIO prefill/decode pair of stand-ins in one mode behind `pdctl proxy`, and `pdctl bench`
through it with each request's TTFT parts: for the breakdown test and `make bench-ttft`."""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.processes import Process, running
from harness.stack import bench, moriio_sim, proxy, zmq_address

PARTS = ("queue", "retry", "prefill", "transfer", "decode")
# Llama-3.1-8B on an L40S: a prefill of a few hundred tokens takes tens of ms, and at 128 KiB
# a token the KV moves in ~1 ms over a 50 GB/s link.
PROFILE = ("--model-profile", "llama-3.1-8b", "--hardware", "l40s")


@contextlib.contextmanager
def pair(tmp: Path, mode: str, link_gbps: float, *proxy_flags: str) -> Iterator[Process]:
    """The proxy in front of a MoRIIO pair in `mode` whose modelled KV link is `link_gbps`."""
    link = ("--kv-link-gbps", f"{link_gbps:g}")
    read = mode == "read"
    tag = f"{mode}-{link_gbps:g}"
    p = moriio_sim(tmp, f"p-{tag}", "kv_producer", read, None, *PROFILE, *link)
    d = moriio_sim(tmp, f"d-{tag}", "kv_consumer", read, None, *PROFILE, *link)
    with running(p, d):
        front = proxy(
            tmp,
            f"proxy-{tag}",
            "--connector",
            "moriio",
            "--mode",
            mode,
            "--prefill",
            f"{p.url}#{zmq_address(p)}",
            "--decode",
            f"{d.url}#{zmq_address(d)}",
            *proxy_flags,
        )
        with running(front):
            yield front


def breakdown(
    tmp: Path, front: Process, prompts: int, rate: float, input_len: int = 512, name: str = "b"
) -> list[dict[str, Any]]:
    """`pdctl bench` through `front`; each request's record (with its `ttft_parts`)."""
    result = bench(
        tmp,
        front.url,
        "--save-requests",
        "--output-len",
        "4",
        "--input-len",
        str(input_len),
        "--num-prompts",
        str(prompts),
        "--request-rate",
        f"{rate:g}",
        name=name,
        timeout=30 + prompts / rate * 4,
    )
    assert result["failed"] == 0, result
    return result["requests"]


def quantiles(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Median and p90 (ms) of each part, and of the TTFT, over the records."""
    out: dict[str, dict[str, float]] = {}
    columns = {p: [r["ttft_parts"][f"{p}_ms"] or 0.0 for r in records] for p in PARTS}
    columns["ttft"] = [r["ttft"] * 1000 for r in records]
    for name, values in columns.items():
        cuts = statistics.quantiles(values, n=10, method="inclusive")
        out[name] = {"p50": statistics.median(values), "p90": cuts[8]}
    return out
