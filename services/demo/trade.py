"""The demo pair of `make run` that shows the trade: the MORI-IO post's workload (Qwen3-235B-
A22B-FP8 on 8 x MI300X, 2,000-token prompts, TTFT < 1 s, p99 ITL < 50 ms) served by the
stand-in on a colocated layout (2 x TP4) and on a disaggregated one (1 prefill TP4 + 1
decode TP4, MoRIIO read), slowed down TIME_SCALE times so this laptop keeps up.

Colocated, every arriving prompt's prefill runs in the same engine step as the running
decodes, so those tokens wait ~135 ms (simulated) instead of ~20 ms: the p99 ITL spikes.
Disaggregated, decodes never wait behind a prefill (flat ITL), and the first token pays the
prefill leg, the KV hand-off and the decode's first step: a higher TTFT.

Chosen on `pdctl plan`'s virtual clock (`pdctl plan --config 2xtp4 --config
1p-tp4+1d-tp4:read --rate 4 --output-len 100 --max-num-batched-tokens 8192 --pd-max-num-seqs
64 --pd-max-num-batched-tokens 4096 --no-prefix-caching`): at RATE req/s (simulated) the
colocated pair's per-request p99 ITL is 136 ms against 26 ms (5.1x), and the disaggregated
TTFT 219 / 664 ms (p50 / p99) against 148 / 243, with the prefill below its capacity (~8 req/s
of 2k prompts) and the machine's load small (~0.1 core for the whole demo). Outputs are
OUTPUT_LEN tokens instead of the post's 1,000, so a request ends ~20 s after it arrives on the
wall clock and the 1 min window fills within the first minute or two.

Everything measured on these deployments is in wall time, TIME_SCALE times the modelled GPU
time; their SLOs are the published ones times TIME_SCALE, so the advisor judges the same
story. Pure: specs and numbers, no I/O."""

from __future__ import annotations

from controller import DeploymentSpec

COLOCATED_NAME = "sim-qwen3-colocated"
DISAGG_NAME = "sim-qwen3-disagg"
TRADE_NAMES = (COLOCATED_NAME, DISAGG_NAME)
ACTOR = "pdctl:demo"

MODEL = "Qwen/Qwen3-235B-A22B-FP8"
HARDWARE = "mi300x"
TIME_SCALE = 8.0  # the stand-in runs 8x slower than the modelled MI300X
RATE = 4.0  # requests per simulated second (the post swept 0.5-10)
INPUT_LEN = 2000  # the post's
OUTPUT_LEN = 100  # the post's 1,000 would keep a request ~3 min on the wall
MAX_IN_FLIGHT = 32  # arrivals past this many unfinished requests are skipped, not queued
PUBLISHED_SLO = {"ttft_ms": 1000.0, "itl_ms": 50.0}


def wall_rate() -> float:
    """Requests per wall second sent to each deployment."""
    return RATE / TIME_SCALE


def colocated_body() -> dict:
    """Standard serving as published: two TP4 engines behind a round-robin proxy."""
    return _body(
        COLOCATED_NAME,
        "colocated",
        [
            {
                "name": "engine",
                "role": "colocated",
                "count": 2,
                "tp": 4,
                "max_num_batched_tokens": 8192,
            }
        ],
    )


def disagg_body() -> dict:
    """MORI-IO 1P1D as published (read mode, 64 sequences, 4,096-token batches)."""
    group = {"tp": 4, "mode": "read", "max_num_seqs": 64, "max_num_batched_tokens": 4096}
    return _body(
        DISAGG_NAME,
        "disaggregated",
        [
            {"name": "prefill", "role": "prefill", **group},
            {"name": "decode", "role": "decode", **group},
        ],
        connector="MoRIIOConnector",
    )


def trade_specs() -> list[DeploymentSpec]:
    return [DeploymentSpec.model_validate(b) for b in (colocated_body(), disagg_body())]


def describe(name: str) -> str:
    """The reason stored with the deployment's first revision (shown in its history)."""
    layout = "2 x TP4 colocated" if name == COLOCATED_NAME else "1P TP4 + 1D TP4 MoRIIO read"
    return (
        f"the demo of `make run`: simulated {MODEL} on 8 x {HARDWARE}, {layout}, "
        f"{TIME_SCALE:g}x slower than the modelled GPUs, under {RATE:g} req/s (simulated) "
        f"of {INPUT_LEN} in / {OUTPUT_LEN} out"
    )


def _body(name: str, topology: str, groups: list[dict], connector: str | None = None) -> dict:
    body = {
        "name": name,
        "engine": "sim",
        "model": MODEL,
        "hardware": HARDWARE,
        "topology": topology,
        "groups": groups,
        "max_model_len": 16384,
        "prefix_caching": False,  # off in every published setup, both layouts
        "time_scale": TIME_SCALE,
        "slo": {
            "ttft_ms": PUBLISHED_SLO["ttft_ms"] * TIME_SCALE,
            "itl_ms": PUBLISHED_SLO["itl_ms"] * TIME_SCALE,
            "itl_stat": "p99",
        },
        # a whole request takes ~20 s of wall time; the hold deadline scaled alike
        "proxy": {"hold_queue": 256, "hold_deadline_s": 30.0 * TIME_SCALE},
    }
    if connector:
        body["connector"] = connector
    return body
