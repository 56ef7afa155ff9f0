"""The what-if planner: a workload through candidate deployments on the virtual clock.

For each configuration (colocated k x TPm, or disaggregated xPyD with TP per role, read or
write) and each offered rate, the engine core's scheduler and timing model serve the same
requests; the rows say how many met TTFT, ITL and both, and which target failed. Pure:
no sockets, no wall clock except what the caller measures. The layouts and the node live in
simulator/plan/setup.py, rows and ranking in simulator/plan/results.py; both are re-exported
here, so callers need only this module.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import replace

from domain.measures.slo import max_goodput_rate
from domain.workload.datasets import random_requests, shared_prefix_requests
from domain.workload.vllm_arrivals import vllm_arrival_times
from simulator.model.timing import FITTED_LISTS, calibrated_factors, tp_overrides
from simulator.plan.cluster import Arrival, RequestResult
from simulator.plan.results import judge, rank, row
from simulator.plan.setup import (
    PLAN_DEFAULTS,
    PLAN_RATE,
    PLAN_SLO,
    EngineFlags,
    PlanConfig,
    PlanError,
    PlanSetup,
    Workload,
    candidate_configs,
    fitting_configs,
    parse_config,
)

__all__ = [
    "PLAN_DEFAULTS",
    "PLAN_RATE",
    "PLAN_SLO",
    "EngineFlags",
    "PlanConfig",
    "PlanError",
    "PlanSetup",
    "Workload",
    "calibration",
    "candidate_configs",
    "fitting_configs",
    "judge",
    "layout",
    "make_arrivals",
    "parse_config",
    "rank",
    "replay",
    "row",
    "run",
    "run_with_results",
    "saturation",
    "search",
    "sweep",
]


def make_arrivals(workload: Workload, rate: float) -> list[Arrival]:
    """The same requests for every configuration at one rate, offered when `vllm bench serve
    --seed` would offer them. Its schedule is stretched so the last request arrives at
    exactly num_prompts / rate: every sequence offers the nominal rate, where free Poisson
    draws of 100 requests offer 7 to 10 req/s at a nominal 8 (the study in issue 20)."""
    requests = _requests(workload)
    times = vllm_arrival_times(len(requests), rate, workload.burstiness, workload.seed)
    return [
        Arrival(f"r{i}", t, r.prompt_ids, r.output_len)
        for i, (t, r) in enumerate(zip(times, requests, strict=True))
    ]


@functools.lru_cache(maxsize=32)
def _requests(workload: Workload) -> tuple:
    """The seeded prompts (immutable), drawn once per workload: every rate and configuration
    of a sweep serves the same ones, and drawing 200k token ids is a quarter of a sweep."""
    rng = random.Random(workload.seed)
    if workload.shared_prefix_len > 0:
        return tuple(
            shared_prefix_requests(
                workload.num_prompts,
                workload.input_len,
                workload.output_len,
                workload.range_ratio,
                workload.shared_prefix_len,
                workload.num_prefixes,
                rng,
            )
        )
    return tuple(
        random_requests(
            workload.num_prompts, workload.input_len, workload.output_len, workload.range_ratio, rng
        )
    )


def run(setup: PlanSetup, config: PlanConfig, workload: Workload, rate: float) -> dict:
    return run_with_results(setup, config, workload, rate)[0]


def run_with_results(
    setup: PlanSetup, config: PlanConfig, workload: Workload, rate: float
) -> tuple[dict, list[RequestResult]]:
    """The row, and the per-request results behind it (for distributions and re-judging)."""
    arrivals = make_arrivals(workload, rate)
    results = replay(setup, config, arrivals)
    start = min((a.at for a in arrivals), default=0.0)
    end = max((r.arrival + r.e2e for r in results if r.e2e is not None), default=start)
    return row(config, rate, results, setup.slo, end - start), results


def replay(setup: PlanSetup, config: PlanConfig, arrivals: list[Arrival]) -> list[RequestResult]:
    """The requests served on `config`, each as the client would see it (a calibrated
    profile's TTFT offset added)."""
    setup.check(config)
    results = setup.cluster(config).run(arrivals)
    if setup.calibration is not None and setup.calibration.ttft_offset_s:
        results = [_offset(r, setup.calibration.ttft_offset_s) for r in results]
    return results


def _offset(result: RequestResult, seconds: float) -> RequestResult:
    """What the measured server adds before the first token, outside the engine's steps."""
    if result.ttft is None:
        return result
    end = None if result.e2e is None else result.e2e + seconds
    return replace(result, ttft=max(0.0, result.ttft + seconds), e2e=end)


def sweep(
    setup: PlanSetup,
    configs: list[PlanConfig],
    workload: Workload,
    rates: list[float],
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Every configuration at every rate. `should_stop` (asked before each run) lets a caller
    bound the wall time: runs not started are counted in `truncated`."""
    rows, best, skipped = [], {}, 0
    for config in configs:
        config_rows = []
        for rate in rates:
            if should_stop is not None and should_stop():
                skipped += 1
                continue
            config_rows.append(run(setup, config, workload, rate))
        rows.extend(config_rows)
        best[config.label] = (
            max_goodput_rate(
                [(r["rate"], r["slo_attainment"]) for r in config_rows], setup.goodput_share
            )
            if config_rows
            else None
        )
    result = {
        "rows": rows,
        "max_goodput_rate": best,
        "goodput_share": setup.goodput_share,
        "slo": {
            "ttft_ms": setup.slo.ttft_ms,
            "itl_ms": setup.slo.itl_ms,
            "itl_stat": setup.slo.itl_stat,
        },
        "calibration": calibration(setup),
        "engine_defaults": setup.defaults_applied(configs),
        "nodes": {"count": setup.nodes, "gpus_per_node": setup.node_shape().gpus_per_node},
        "layouts": {c.label: layout(setup, c) for c in configs},
    }
    if skipped:
        result["truncated"] = f"{skipped} of {len(configs) * len(rates)} runs not started"
    return result


def layout(setup: PlanSetup, config: PlanConfig) -> dict:
    """Where a layout's engines sit and, disaggregated, which link each hand-off takes."""
    out: dict = {"nodes": setup.place(config).describe()}
    if config.kind == "disaggregated":
        out["handoffs"] = setup.handoffs(config)
    return out


def calibration(setup: PlanSetup) -> list[dict]:
    """The timing factors in use and the published points they were fitted to: the pair's
    entry, then one per TP degree that has a factor of its own; a measured calibration first,
    saying so."""
    measured: list[dict] = []
    if setup.calibration is not None:
        cal = setup.calibration
        measured.append(
            {
                "hardware": cal.hardware,
                "model": cal.model,
                "tp": cal.tp,
                "calibrated": True,
                "factors": cal.coefficients(),
                "fitted_to": [cal.describe()],
                "error": cal.error,
            }
        )
    base = calibrated_factors(setup.hardware, setup.model)
    entries: list[dict] = [
        {
            "hardware": setup.hardware,
            "model": setup.model,
            "tp": "any",
            "factors": _factor_values(base),
            "fitted_to": list(base.fitted_to) or ["defaults (not fitted)"],
        }
    ]
    for tp in tp_overrides(setup.hardware, setup.model):
        own = calibrated_factors(setup.hardware, setup.model, tp)
        entries.append(
            {
                "hardware": setup.hardware,
                "model": setup.model,
                "tp": tp,
                "factors": {k: v for k, v in _factor_values(own).items() if v != getattr(base, k)},
                "fitted_to": [f for f in own.fitted_to if f not in base.fitted_to],
            }
        )
    return measured + entries


def _factor_values(factors) -> dict:
    return {k: getattr(factors, k) for k in factors.__dataclass_fields__ if k not in FITTED_LISTS}


def search(
    setup: PlanSetup,
    workload: Workload,
    rates: list[float],
    modes: tuple[str, ...] = ("write",),
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Rank the budget's layouts on the nodes by max_goodput_rate, and say why the winner
    wins."""
    result = sweep(setup, fitting_configs(setup, modes), workload, rates, should_stop)
    return {**result, **rank(result, setup)}


def saturation(setup: PlanSetup, configs: list[PlanConfig], workload: Workload) -> list[dict]:
    """Everything at once: total tokens/s per configuration (disaggregation buys no throughput)."""
    rows = []
    for config in configs:
        r = run(setup, config, replace(workload), math.inf)
        tokens = workload.num_prompts * (workload.input_len + workload.output_len)
        rows.append(
            {
                "config": config.label,
                "gpus": config.gpus,
                "duration_s": round(r["duration_s"], 3),
                "total_tokens_per_s": round(tokens / r["duration_s"], 1),
                "output_tokens_per_s": round(r["output_throughput"], 1),
            }
        )
    return rows
