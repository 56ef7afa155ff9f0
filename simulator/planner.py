"""The what-if planner: a workload through candidate deployments on the virtual clock.

For each configuration (colocated k x TPm, or disaggregated xPyD with TP per role, read or
write) and each offered rate, the engine core's scheduler and timing model serve the same
requests; the rows say how many met TTFT, ITL and both, and which target failed. Pure:
no sockets, no wall clock except what the caller measures.
"""

from __future__ import annotations

import functools
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from domain import profiles, slo
from domain.arrivals import arrival_times
from domain.datasets import random_requests, shared_prefix_requests
from domain.modes import TRANSFER_MODES
from domain.slo import SloTargets, max_goodput_rate, percentile
from simulator.cluster import Arrival, Cluster, RequestResult
from simulator.scheduler import Scheduler, SchedulerConfig
from simulator.timing import TimingModel, calibrated_factors, tp_overrides

_COLOCATED = re.compile(r"^(?P<count>\d+)x-?tp(?P<tp>\d+)$")
_DISAGG = re.compile(
    r"^(?P<p>\d+)p-?tp(?P<ptp>\d+)\+(?P<d>\d+)d-?tp(?P<dtp>\d+)"
    r"(?::(?P<mode>read|write))?$"
)


class PlanError(ValueError):
    """A configuration or workload the planner cannot run; the message names the option."""


@dataclass(frozen=True, slots=True)
class PlanConfig:
    """One candidate deployment on one node."""

    kind: str  # colocated | disaggregated
    count: int = 1  # colocated engines
    tp: int = 1  # colocated TP
    prefills: int = 0
    prefill_tp: int = 0
    decodes: int = 0
    decode_tp: int = 0
    mode: str = "write"
    name: str = ""  # a scenario's own name for it; the label otherwise

    @property
    def gpus(self) -> int:
        if self.kind == "colocated":
            return self.count * self.tp
        return self.prefills * self.prefill_tp + self.decodes * self.decode_tp

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.kind == "colocated":
            return f"{self.count}xTP{self.tp}"
        return (
            f"{self.prefills}P-TP{self.prefill_tp}+{self.decodes}D-TP{self.decode_tp} {self.mode}"
        )


def parse_config(text: str) -> PlanConfig:
    """`2xtp4` (colocated) or `1p-tp4+1d-tp4:write` (disaggregated; mode defaults to write)."""
    spec = text.strip().lower().replace(" ", "")
    if m := _COLOCATED.match(spec):
        config = PlanConfig("colocated", count=int(m["count"]), tp=int(m["tp"]))
    elif m := _DISAGG.match(spec):
        config = PlanConfig(
            "disaggregated",
            prefills=int(m["p"]),
            prefill_tp=int(m["ptp"]),
            decodes=int(m["d"]),
            decode_tp=int(m["dtp"]),
            mode=m["mode"] or "write",
        )
    else:
        raise PlanError(
            f"--config {text!r}: expected NxtpM (colocated, e.g. 2xtp4) or "
            "XPp-tpA+YDd-tpB[:read|write] (e.g. 1p-tp4+1d-tp4:write)"
        )
    sizes = (
        (config.count, config.tp)
        if config.kind == "colocated"
        else (config.prefills, config.prefill_tp, config.decodes, config.decode_tp)
    )
    if min(sizes) < 1:
        raise PlanError(f"--config {text!r}: every count and TP must be at least 1")
    return config


@dataclass(frozen=True, slots=True)
class EngineFlags:
    """vLLM's engine flags for one role."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    prefix_caching: bool = False


@dataclass(frozen=True, slots=True)
class Workload:
    num_prompts: int = 100
    input_len: int = 2000
    output_len: int = 1000
    range_ratio: float = 0.0
    burstiness: float = 1.0
    seed: int = 0
    shared_prefix_len: int = 0  # >0: prompts open with one of a few shared prefixes
    num_prefixes: int = 4


# The planner's targets unless told otherwise: the MORI-IO blog's (SCENARIOS.md).
PLAN_SLO = SloTargets(ttft_ms=1000.0, itl_ms=50.0)


@dataclass(frozen=True)
class PlanSetup:
    model: str
    hardware: str
    gpus: int = 8
    colocated_flags: EngineFlags = field(default_factory=EngineFlags)
    prefill_flags: EngineFlags = field(default_factory=EngineFlags)
    decode_flags: EngineFlags = field(default_factory=EngineFlags)
    link_gbps: float | None = None  # GB/s between a prefill and a decode; None: NICs x TP
    link_latency_s: float = 0.0002
    slo: SloTargets = PLAN_SLO
    goodput_share: float = 0.9

    def check(self, config: PlanConfig) -> None:
        if config.gpus > self.gpus:
            raise PlanError(
                f"--config {config.label}: needs {config.gpus} GPUs, the node has "
                f"{self.gpus} (--gpus)"
            )
        tps = [config.tp] if config.kind == "colocated" else [config.prefill_tp, config.decode_tp]
        for tp in tps:
            timing = self._timing(tp)
            if timing.kv_pool_tokens() < 16:
                raise PlanError(
                    f"--config {config.label}: {self.model} does not fit on "
                    f"TP{tp} x {self.hardware}"
                )

    def _timing(self, tp: int) -> TimingModel:
        return TimingModel(profiles.model(self.model), profiles.hardware(self.hardware), tp)

    def engine(self, tp: int, flags: EngineFlags) -> Scheduler:
        return Scheduler(
            self._timing(tp),
            SchedulerConfig(
                max_num_seqs=flags.max_num_seqs,
                max_num_batched_tokens=flags.max_num_batched_tokens,
                enable_prefix_caching=flags.prefix_caching,
            ),
        )

    def link_bytes_per_s(self, config: PlanConfig) -> float:
        if self.link_gbps is not None:
            return self.link_gbps * 1e9
        # One RDMA NIC per GPU: a pair moves KV over as many NICs as its smaller side has.
        hw = profiles.hardware(self.hardware)
        return hw.nic_bytes_per_s * min(config.prefill_tp, config.decode_tp)

    def cluster(self, config: PlanConfig) -> Cluster:
        if config.kind == "colocated":
            return Cluster(
                colocated=[
                    self.engine(config.tp, self.colocated_flags) for _ in range(config.count)
                ]
            )
        return Cluster(
            prefills=[
                self.engine(config.prefill_tp, self.prefill_flags) for _ in range(config.prefills)
            ],
            decodes=[
                self.engine(config.decode_tp, self.decode_flags) for _ in range(config.decodes)
            ],
            mode=config.mode,
            link_bytes_per_s=self.link_bytes_per_s(config),
            link_latency_s=self.link_latency_s,
        )


def make_arrivals(workload: Workload, rate: float) -> list[Arrival]:
    """The same requests for every configuration at one rate (seeded)."""
    requests = _requests(workload)
    times = arrival_times(
        len(requests), rate, workload.burstiness, random.Random(f"{workload.seed}:arrivals")
    )  # as pdctl bench
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


def judge(results: list[RequestResult], targets: SloTargets) -> tuple[int, int, int]:
    """Requests meeting TTFT, meeting ITL (by the per-request statistic), meeting both, as the
    proxy and `pdctl bench` judge them (domain/slo.py)."""
    met_ttft = met_itl = met_both = 0
    for r in results:
        verdict = slo.judge(targets, r.ttft, r.itl(targets.itl_stat))
        met_ttft += verdict.ttft
        met_itl += verdict.itl
        met_both += verdict.met
    return met_ttft, met_itl, met_both


def row(
    config: PlanConfig, rate: float, results: list[RequestResult], slo: SloTargets, duration: float
) -> dict:
    met_ttft, met_itl, met_both = judge(results, slo)
    n = len(results)
    ttfts = [r.ttft * 1000 for r in results if r.ttft is not None]
    gaps = [(g * 1000, c) for r in results for g, c in r.itl_gaps]
    failed = "none"
    if met_both < n:
        failed = "both" if met_ttft < n and met_itl < n else "ttft" if met_ttft < n else "itl"
    out_tokens = sum(r.output_tokens for r in results)
    return {
        "config": config.label,
        "rate": rate,
        "requests": n,
        "met_ttft": met_ttft,
        "met_itl": met_itl,
        "met_both": met_both,
        "slo_attainment": met_both / n if n else 0.0,
        "p50_ttft_ms": _pct(ttfts, 50),
        "p99_ttft_ms": _pct(ttfts, 99),
        "p50_itl_ms": _weighted_pct(gaps, 50),
        "p99_itl_ms": _weighted_pct(gaps, 99),
        "failed_target": failed,
        "output_throughput": out_tokens / duration if duration else 0,
        "duration_s": duration,
        "gpus": config.gpus,
    }


def _pct(values: list[float], p: float) -> float | None:
    value = percentile(values, p)
    return None if value is None else round(value, 3)


def _weighted_pct(gaps: list[tuple[float, int]], p: float) -> float | None:
    total = sum(c for _, c in gaps)
    if total == 0:
        return None
    rank = max(1, math.ceil(p / 100 * total))
    seen = 0
    for gap, count in sorted(gaps):
        seen += count
        if seen >= rank:
            return round(gap, 3)
    return None


def run(setup: PlanSetup, config: PlanConfig, workload: Workload, rate: float) -> dict:
    return run_with_results(setup, config, workload, rate)[0]


def run_with_results(
    setup: PlanSetup, config: PlanConfig, workload: Workload, rate: float
) -> tuple[dict, list[RequestResult]]:
    """The row, and the per-request results behind it (for distributions and re-judging)."""
    setup.check(config)
    arrivals = make_arrivals(workload, rate)
    results = setup.cluster(config).run(arrivals)
    start = min((a.at for a in arrivals), default=0.0)
    end = max((r.arrival + r.e2e for r in results if r.e2e is not None), default=start)
    return row(config, rate, results, setup.slo, end - start), results


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
    }
    if skipped:
        result["truncated"] = f"{skipped} of {len(configs) * len(rates)} runs not started"
    return result


def calibration(setup: PlanSetup) -> list[dict]:
    """The timing factors in use and the published points they were fitted to: the pair's
    entry, then one per TP degree that has a factor of its own."""
    base = calibrated_factors(setup.hardware, setup.model)
    entries = [
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
    return entries


def _factor_values(factors) -> dict:
    return {k: getattr(factors, k) for k in factors.__dataclass_fields__ if k != "fitted_to"}


def candidate_configs(gpus: int, modes: tuple[str, ...] = TRANSFER_MODES) -> list[PlanConfig]:
    """Every one-node layout: colocated k x TPm and disaggregated xPyD with TP per role."""
    tps = [t for t in (1, 2, 4, 8) if t <= gpus]
    out = [PlanConfig("colocated", count=gpus // t, tp=t) for t in tps]
    for ptp in tps:
        for dtp in tps:
            for p in range(1, gpus // ptp + 1):
                d = (gpus - p * ptp) // dtp
                if d >= 1 and p * ptp + d * dtp == gpus:
                    out += [
                        PlanConfig(
                            "disaggregated",
                            prefills=p,
                            prefill_tp=ptp,
                            decodes=d,
                            decode_tp=dtp,
                            mode=m,
                        )
                        for m in modes
                    ]
    return out


def fitting_configs(setup: PlanSetup, modes: tuple[str, ...] = ("write",)) -> list[PlanConfig]:
    """The one-node layouts whose every engine holds the model."""
    out = []
    for config in candidate_configs(setup.gpus, modes):
        try:
            setup.check(config)
        except PlanError:
            continue
        out.append(config)
    return out


def search(
    setup: PlanSetup,
    workload: Workload,
    rates: list[float],
    modes: tuple[str, ...] = ("write",),
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Rank one-node layouts by max_goodput_rate, and say why the winner wins."""
    result = sweep(setup, fitting_configs(setup, modes), workload, rates, should_stop)
    return {**result, **rank(result, setup)}


def rank(result: dict, setup: PlanSetup) -> dict:
    """A sweep's configurations, best max_goodput_rate first (then attainment at the top
    rate run), with the reason the winner wins."""
    by_config: dict[str, list[dict]] = {}
    for row in result["rows"]:
        by_config.setdefault(row["config"], []).append(row)
    ranked = [
        {
            "config": name,
            "max_goodput_rate": result["max_goodput_rate"][name],
            "attainment_at_top_rate": rows[-1]["slo_attainment"],
            "failed_target_at_top_rate": rows[-1]["failed_target"],
            "rows": rows,
        }
        for name, rows in by_config.items()
    ]
    ranked.sort(
        key=lambda r: (r["max_goodput_rate"] or 0, r["attainment_at_top_rate"]), reverse=True
    )
    return {"ranked": ranked, "reason": _why(ranked, setup)}


def _why(ranked: list[dict], setup: PlanSetup) -> str:
    if not ranked:
        return "no layout fits the model on this node"
    win = ranked[0]
    if not win["max_goodput_rate"]:
        return (
            f"no layout keeps {setup.goodput_share:.0%} of requests within the SLO at any "
            f"tested rate; {win['config']} comes closest "
            f"(fails on {win['failed_target_at_top_rate']})"
        )
    runner = next((r for r in ranked[1:] if r["max_goodput_rate"] != win["max_goodput_rate"]), None)
    text = (
        f"{win['config']} sustains {win['max_goodput_rate']} req/s with "
        f"{setup.goodput_share:.0%} of requests within TTFT {setup.slo.ttft_ms:g} ms and "
        f"ITL ({setup.slo.itl_stat}) {setup.slo.itl_ms:g} ms"
    )
    if runner is not None:
        text += (
            f"; the next best, {runner['config']}, reaches "
            f"{runner['max_goodput_rate'] or 0} req/s and past it fails on "
            f"{runner['failed_target_at_top_rate']}"
        )
    return text


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
