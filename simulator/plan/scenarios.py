"""Published results the planner is held against (shared/SCENARIOS.md), as runnable scenarios.

The MORI-IO post ran one arrival sequence of vLLM's client (seed and process unpublished;
`vllm bench serve` defaults to Poisson arrivals and seed 0, stretched so the last request
arrives at num_prompts / rate). Near the prefill instance's capacity (8 req/s of 2,000-token
prompts on one TP4 prefill) bursts within one sequence still move the disaggregated count by
tens of requests, so the scenario runs the published rate under many of vLLM's seeded
sequences and compares the mean with the published count; seed 0 alone drives the full rate
sweep and the per-request distributions.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from domain.measures import slo
from domain.measures.slo import ItlStat, SloTargets, percentile
from simulator.plan.cluster import RequestResult
from simulator.plan.planner import (
    PLAN_DEFAULTS,
    PLAN_SLO,
    EngineFlags,
    PlanConfig,
    PlanError,
    PlanSetup,
    Workload,
    judge,
    parse_config,
    run_with_results,
    saturation,
    sweep,
)

PUBLISHED_RATE = 8.0
DEFAULT_SEEDS = 20
# The vLLM blog of 2026-04-07: MORI-IO on 8 x MI300X, Qwen3-235B-A22B-FP8, 2k in / 1k out,
# 100 requests, TTFT < 1 s and ITL < 50 ms; at 8 req/s (SCENARIOS.md, per-request data).
MORI_IO_PUBLISHED: dict[str, dict[str, Any]] = {
    "colocated-tp8": {
        "met_both": 26,
        "fail_ttft_only": 0,
        "fail_itl_only": 74,
        "ttft_s": {"p50": 0.346, "p90": 0.582, "p99": 0.680, "max": 0.700},
        "itl_clusters": "26 at 29-32 ms; 8 at ~123-126 ms; 66 at ~176-183 ms",
    },
    "colocated-2xtp4": {
        "met_both": 29,
        "fail_ttft_only": 0,
        "fail_itl_only": 71,
        "ttft_s": {"p50": 0.228, "p90": 0.447, "p99": 0.622, "max": 0.643},
        "itl_clusters": "29 at 31-36 ms; 71 at 150-153 ms",
    },
    "disagg-read": {
        "met_both": 70,
        "fail_ttft_only": 30,
        "fail_itl_only": 0,
        "ttft_s": {"p50": 0.648, "p90": 1.288, "p99": 1.474, "max": 1.531},
        "itl_clusters": "100 at 37-40 ms",
    },
    "disagg-write": {
        "met_both": 73,
        "fail_ttft_only": 27,
        "fail_itl_only": 0,
        "ttft_s": {"p50": 0.645, "p90": 1.281, "p99": 1.545, "max": 1.551},
        "itl_clusters": "100 at 36-39 ms",
    },
}
MORI_IO_CONFIGS = {
    "colocated-tp8": "1xtp8",
    "colocated-2xtp4": "2xtp4",
    "disagg-read": "1p-tp4+1d-tp4:read",
    "disagg-write": "1p-tp4+1d-tp4:write",
}
WITHIN = 10  # requests of 100: how close the mean must come to each published count


def mori_io_setup() -> PlanSetup:
    # Standard runs: --max-num-batched-tokens 8192, vLLM's default max-num-seqs. The
    # disaggregated ones: 4096 and 64 as published; the decode's 64 cannot have held (with
    # 100 requests of 1,000 tokens a cap of 64 makes TTFT p99 ~30 s, while the post reports
    # 1.5 s), so the decode runs with vLLM's default.
    return replace(
        PLAN_DEFAULTS,
        colocated_flags=EngineFlags(256, 8192, False),
        prefill_flags=EngineFlags(64, 4096, False),
        decode_flags=EngineFlags(256, 4096, False),
        slo=PLAN_SLO,
    )


def mori_io_configs() -> list[PlanConfig]:
    return [replace(parse_config(spec), name=name) for name, spec in MORI_IO_CONFIGS.items()]


def named_config(text: str) -> PlanConfig:
    """A layout as `pdctl plan --config`, POST /api/plan and the /plan page all take it: one
    of the MORI-IO scenario's names (disagg-read ...) or a spec (2xtp4, 1p-tp4+1d-tp4:write)."""
    name = text.strip()
    if name in MORI_IO_CONFIGS:
        return replace(parse_config(MORI_IO_CONFIGS[name]), name=name)
    try:
        return parse_config(text)
    except PlanError as exc:
        raise PlanError(f"{exc}; or one of {', '.join(MORI_IO_CONFIGS)}") from None


def mori_io_qwen3_235b(rates: list[float] | None = None, seeds: int = DEFAULT_SEEDS) -> dict:
    """The full sweep on seed 0, then the published rate under `seeds` arrival sequences."""
    setup, configs = mori_io_setup(), mori_io_configs()
    rates = rates or [round(0.5 * i, 1) for i in range(1, 21)]
    started = time.perf_counter()
    result = sweep(setup, configs, Workload(100, 2000, 1000, seed=0), rates)
    result["sweep_wall_s"] = round(time.perf_counter() - started, 3)
    for r in result["rows"]:
        if math.isclose(r["rate"], PUBLISHED_RATE):
            r["published"] = MORI_IO_PUBLISHED[r["config"]]["met_both"]
    result["rows"] = [r for r in result["rows"] if math.isclose(r["rate"], PUBLISHED_RATE)] + [
        r for r in result["rows"] if not math.isclose(r["rate"], PUBLISHED_RATE)
    ]
    started = time.perf_counter()
    result["published_rate"] = published_rate_report(setup, configs, max(1, seeds))
    result["published_rate_wall_s"] = round(time.perf_counter() - started, 3)
    result["checks"] = checks(result["published_rate"])
    return result


def published_rate_report(setup: PlanSetup, configs: list[PlanConfig], seeds: int) -> dict:
    """Per configuration at 8 req/s: the seed-0 distributions beside the published ones, and
    the met-both count over `seeds` sequences (mean, range) under each ITL statistic."""
    report: dict = {
        "rate": PUBLISHED_RATE,
        "seeds": seeds,
        "itl_stat": setup.slo.itl_stat,
        "configs": {},
    }
    for config in configs:
        counts: dict[str, list[int]] = {"p99": [], "mean": [], "max": []}
        fail_ttft_only, fail_itl_only, ttfts, first = [], [], [], None
        for seed in range(seeds):
            row, results = run_with_results(
                setup, config, Workload(100, 2000, 1000, seed=seed), PUBLISHED_RATE
            )
            first = first or (row, results)
            for stat, kept in counts.items():
                kept.append(judge(results, replace(setup.slo, itl_stat=ItlStat(stat)))[2])
            ttft_only, itl_only = _failures(results, setup.slo)
            fail_ttft_only.append(ttft_only)
            fail_itl_only.append(itl_only)
            ttfts.append(_ttft_percentiles(results))
        if first is None:
            raise ValueError("published_rate_report runs at least one seed")
        row, results = first
        report["configs"][config.label] = {
            "met_both": _spread(counts[setup.slo.itl_stat]),
            "met_both_by_itl_stat": {stat: _spread(kept) for stat, kept in counts.items()},
            "fail_ttft_only": _spread(fail_ttft_only),
            "fail_itl_only": _spread(fail_itl_only),
            # Each TTFT percentile's median over the sequences; seed 0's ITL values.
            "ttft_s": {k: round(statistics.median(t[k] for t in ttfts), 3) for k in ttfts[0]},
            "seed0": {
                "met_both": row["met_both"],
                "ttft_s": ttfts[0],
                "itl_clusters": itl_clusters(results, setup.slo.itl_stat),
            },
            "published": MORI_IO_PUBLISHED.get(config.label),
        }
    return report


def checks(report: dict) -> list[dict]:
    """The issue's must-show claims, each with whether the model holds it."""
    mean = {name: c["met_both"]["mean"] for name, c in report["configs"].items()}
    out = [
        {
            "claim": "write >= read > 2 x TP4 >= 1 x TP8 at 8 req/s (mean met both)",
            "holds": mean["disagg-write"]
            >= mean["disagg-read"]
            > mean["colocated-2xtp4"]
            >= mean["colocated-tp8"],
        }
    ]
    for name in ("disagg-read", "disagg-write"):
        c = report["configs"][name]
        out.append(
            {
                "claim": f"{name}: no ITL misses in any sequence, misses all TTFT",
                "holds": c["fail_itl_only"]["max"] == 0,
            }
        )
    for name, c in report["configs"].items():
        published = (c["published"] or {}).get("met_both")
        if published is not None:
            gap = abs(c["met_both"]["mean"] - published)
            out.append(
                {
                    "claim": f"{name}: mean met both {c['met_both']['mean']:g} within "
                    f"{WITHIN} of published {published} (off by {gap:g})",
                    "holds": gap <= WITHIN,
                }
            )
    return out


def _failures(results: list[RequestResult], targets: SloTargets) -> tuple[int, int]:
    """Requests that missed only TTFT (an unanswered one among them), and only ITL."""
    ttft_only = itl_only = 0
    for r in results:
        if r.ttft is None:
            ttft_only += 1
            continue
        verdict = slo.judge(targets, r.ttft, r.itl(targets.itl_stat))
        ttft_only += verdict.itl and not verdict.ttft
        itl_only += verdict.ttft and not verdict.itl
    return ttft_only, itl_only


def _spread(values: list[int]) -> dict:
    return {
        "mean": round(statistics.mean(values), 1),
        "min": min(values),
        "max": max(values),
        "seed0": values[0],
    }


def _ttft_percentiles(results: list[RequestResult]) -> dict:
    ttfts = [r.ttft for r in results if r.ttft is not None]
    return (
        {
            k: round(percentile(ttfts, p) or 0.0, 3)
            for k, p in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))
        }
        if ttfts
        else {}
    )


def itl_clusters(results: list[RequestResult], stat: str, gap_ms: float = 10.0) -> str:
    """Per-request ITL values grouped where neighbours lie within `gap_ms`, as the post
    describes them: "29 at 31-36 ms; 71 at 150-153 ms"."""
    values = sorted(v * 1000 for r in results if (v := r.itl(stat)) is not None)
    groups: list[list[float]] = []
    for v in values:
        if groups and v - groups[-1][-1] <= gap_ms:
            groups[-1].append(v)
        else:
            groups.append([v])
    return "; ".join(f"{len(g)} at {g[0]:.0f}-{g[-1]:.0f} ms" for g in groups)


def saturation_scenario() -> dict:
    """All 100 requests at once on the same 8 GPUs: does splitting raise tokens/s? (No.)"""
    rows = saturation(mori_io_setup(), mori_io_configs(), Workload(100, 2000, 1000, seed=0))
    colocated = max(r["total_tokens_per_s"] for r in rows if r["config"].startswith("colo"))
    split = max(r["total_tokens_per_s"] for r in rows if r["config"].startswith("disagg"))
    verdict = f"best disaggregated {split:g} tok/s vs best colocated {colocated:g} tok/s: " + (
        "disaggregation does not raise throughput"
        if split <= colocated
        else "disaggregation raised throughput here"
    )
    return {"saturation": rows, "verdict": verdict}


# Kept for callers of the first name; the issue names the scenario mori-io-qwen3-235b.
mori_io_blog = mori_io_qwen3_235b


def fidelity_scenario(rates: list[float] | None = None, seeds: int = DEFAULT_SEEDS) -> dict:
    """Every published figure beside the model's (simulator/plan/fidelity.py; `rates` unused)."""
    from simulator.plan.fidelity import fidelity_table

    return fidelity_table(seeds)


SCENARIOS: dict[str, Callable[..., dict]] = {
    "mori-io-qwen3-235b": mori_io_qwen3_235b,
    "mori-io-blog": mori_io_qwen3_235b,
    "saturation": saturation_scenario,
    "fidelity": fidelity_scenario,
}
