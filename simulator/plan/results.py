"""What a plan's runs say: one run's row (requests meeting TTFT, ITL and both, the failed
target, latency percentiles, throughput) and a sweep's layouts ranked by max_goodput_rate,
with the reason the winner wins.
"""

from __future__ import annotations

import math

from domain.measures import slo
from domain.measures.slo import SloTargets, percentile
from simulator.plan.cluster import RequestResult
from simulator.plan.setup import PlanConfig, PlanSetup


def judge(results: list[RequestResult], targets: SloTargets) -> tuple[int, int, int]:
    """Requests meeting TTFT, meeting ITL (by the per-request statistic), meeting both, as the
    proxy and `pdctl bench` judge them (domain/measures/slo.py)."""
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
        return "no layout fits the model on these nodes"
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
