"""Deployment specs of stand-ins playing big models, which the tests and the benchmarks both
start (plain dicts: API bodies)."""

from __future__ import annotations

from typing import Any


def qwen3_2p2d(name: str = "cap", time_scale: float = 8.0, **over: Any) -> dict:
    """Qwen3-235B-A22B-FP8 on MI300X stand-ins, 2 prefills and 2 decodes of TP4 with 16
    sequences and 4,096-token chunks (the autopilot bench's shape), slowed `time_scale` times."""
    group = {"tp": 4, "max_num_seqs": 16, "max_num_batched_tokens": 4096}
    return {
        "name": name,
        "engine": "sim",
        "model": "Qwen/Qwen3-235B-A22B-FP8",
        "hardware": "mi300x",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "time_scale": time_scale,
        "groups": [
            {"name": "prefill", "role": "prefill", "count": 2, **group},
            {"name": "decode", "role": "decode", "count": 2, **group},
        ],
        **over,
    }
