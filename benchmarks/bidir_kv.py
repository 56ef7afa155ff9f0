"""`make bench-bidir`: bidirectional KV for multi-turn, on and off in the same run.

Two NIXL stand-in pairs behind two `pdctl proxy`s, the same everywhere except for
bidirectional KV (the engines' `bidirectional_kv_xfer`, the proxy's `--bidirectional-kv`),
each given the same growing-context chat workload (bench/turns/multi_turn.py: turn k = turn k-1 +
its real answer + new user text). Printed per turn: the client's TTFT and the prefill's
prompt tokens computed (vllm:prompt_tokens_by_source{local_compute}) and pulled back
(external_kv_transfer), as ratios on / off.

The engines model llama-3.1-70b on H100 TP4 (a NIXL pull of 2,000 tokens' KV ~6 ms, their
prefill ~120 ms): where the pull costs more than the compute (e.g. the L40S profile, staged
through host memory) bidirectional KV loses, which is what vLLM's kv_recompute_threshold is
for. Prefix caching stays on (vLLM's default): with it off, the baseline computes each turn's
whole prompt and the gap is wider. Times are the stand-ins' modelled ones at --time-scale 1.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import tempfile
from pathlib import Path

from bench.turns.multi_turn import MultiTurnConfig, TurnSummary, run_multi_turn
from harness.processes import Process, metric_value, running
from harness.stack import nixl_sim, proxy

PROFILE = ("--model-profile", "llama-3.1-70b", "--hardware", "h100", "--tensor-parallel-size", "4")
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


def _by_source(inst: Process) -> dict[str, float]:
    text = inst.metrics()
    return {s: metric_value(text, "vllm:prompt_tokens_by_source_total", source=s) for s in SOURCES}


async def _measure(tmp: Path, on: bool, config: MultiTurnConfig) -> list[TurnSummary]:
    extra = {"bidirectional_kv_xfer": True} if on else None
    name = "on" if on else "off"
    prefill = nixl_sim(tmp, f"prefill-{name}", "kv_producer", *PROFILE, extra=extra)
    decode = nixl_sim(tmp, f"decode-{name}", "kv_consumer", *PROFILE, extra=extra)
    with running(prefill, decode):
        flags = ["--connector", "nixl", "--mode", "read", "--prefill", prefill.url]
        flags += ["--decode", decode.url, *(["--bidirectional-kv"] if on else [])]
        front = proxy(tmp, f"proxy-{name}", *flags)
        with running(front):
            seen = _by_source(prefill)

            async def between(turn: int) -> dict[str, float]:
                nonlocal seen
                now = _by_source(prefill)
                delta = {k: (now[k] - seen[k]) / config.conversations for k in SOURCES}
                seen = now
                return delta

            _, summaries = await run_multi_turn(front.url, "llama-3.1-70b", config, between)
    return summaries


def pooled(rounds: list[list[TurnSummary]]) -> list[TurnSummary]:
    """Each turn's means over the rounds (ok: summed)."""
    out = []
    for turn in zip(*rounds, strict=True):
        keys = {k for s in turn for k in s.extra}
        out.append(
            TurnSummary(
                turn[0].turn,
                sum(s.ok for s in turn),
                statistics.fmean(s.mean_ttft_ms for s in turn),
                statistics.fmean(s.mean_prompt_tokens for s in turn),
                {k: statistics.fmean(s.extra.get(k, 0.0) for s in turn) for k in keys},
            )
        )
    return out


def _ratio(on: float, off: float) -> str:
    if off == 0 or math.isnan(on) or math.isnan(off):
        return "   -"
    return f"{on / off:5.2f}"


def report(on: list[TurnSummary], off: list[TurnSummary]) -> str:
    head = (
        f"{'turn':>4} {'prompt':>7} | {'TTFT ms on':>10} {'off':>8} {'on/off':>6} | "
        f"{'computed on':>11} {'off':>7} {'on/off':>6} | {'pulled on':>9} {'cached off':>10}"
    )
    lines = [head, "-" * len(head)]
    for a, b in zip(on, off, strict=True):
        ca, cb = a.extra.get("local_compute", 0.0), b.extra.get("local_compute", 0.0)
        lines.append(
            f"{a.turn + 1:>4} {a.mean_prompt_tokens:>7.0f} | {a.mean_ttft_ms:>10.1f} "
            f"{b.mean_ttft_ms:>8.1f} {_ratio(a.mean_ttft_ms, b.mean_ttft_ms):>6} | "
            f"{ca:>11.0f} {cb:>7.0f} {_ratio(ca, cb):>6} | "
            f"{a.extra.get('external_kv_transfer', 0.0):>9.0f} "
            f"{b.extra.get('local_cache_hit', 0.0):>10.0f}"
        )
    ok = [(a.ok, b.ok) for a, b in zip(on, off, strict=True)]
    lines.append("turns ok per turn (on, off): " + " ".join(f"{a}/{b}" for a, b in ok))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--first-len", type=int, default=2000)
    parser.add_argument("--user-len", type=int, default=100)
    parser.add_argument("--output-len", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    config = MultiTurnConfig(
        args.conversations, args.turns, args.first_len, args.user_len, args.output_len
    )
    runs: dict[bool, list[list[TurnSummary]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="pdctl-bidir-") as tmp:
        for r in range(args.rounds):  # on, off, off, on, ...: a drifting machine hits both
            for on in (True, False) if r % 2 == 0 else (False, True):
                where = Path(tmp) / f"round{r}"
                where.mkdir(exist_ok=True)
                runs[on].append(asyncio.run(_measure(where, on, config)))
    print(
        f"bidirectional KV, {config.conversations} conversations x {config.turns} turns: first "
        f"{config.first_len} tokens, then +{config.user_len} user, {config.output_len} answer "
        f"(llama-3.1-70b on H100 TP4, stand-ins; per-turn means over conversations and "
        f"{args.rounds} rounds, on and off interleaved)"
    )
    print(report(pooled(runs[True]), pooled(runs[False])))


if __name__ == "__main__":
    main()
