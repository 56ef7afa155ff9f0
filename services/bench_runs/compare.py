"""Stored bench runs as curves to overlay: slo_attainment (and p99 TTFT, ITL) against the
offered rate, one curve per run, labelled with what it measured (and marked partial when a
stopped sweep kept only the rates it had measured). Pure: rows in, JSON out."""

from __future__ import annotations

from typing import Any

from state.models import BenchRun

POINT_FIELDS = (
    "slo_attainment",
    "p99_ttft_ms",
    "p99_itl_ms",
    "request_goodput",
    "completed",
    "failed",
)


def rate_runs(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The per-rate summaries of a bench document: a sweep keeps them under `runs`, a single
    rate is one flat summary (bench/report.py)."""
    if not result:
        return []
    runs = result.get("runs")
    return list(runs) if isinstance(runs, list) else [result]


def points(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One point per offered rate, in rate order; a rate the document gives as "inf" (all at
    once) cannot sit on a rate axis and is left out."""
    out = []
    for run in rate_runs(result):
        rate = run.get("request_rate")
        if isinstance(rate, int | float):
            out.append({"rate": float(rate), **{k: run.get(k) for k in POINT_FIELDS}})
    return sorted(out, key=lambda p: p["rate"])


def label(run: BenchRun) -> str:
    """`mori r3 · write 1P1D`: deployment, revision, and the shape it had."""
    shape = run.topology.get("shape") or run.topology.get("topology", "?")
    return f"{run.deployment} r{run.revision} · {shape}"


def rates_offered(run: BenchRun) -> int:
    return len(run.config.get("rates") or [])


def rates_measured(run: BenchRun) -> int:
    return len(rate_runs(run.result))


def partial(run: BenchRun) -> bool:
    """The run was stopped (or killed) part-way and kept the rates it had measured: a curve
    over fewer rates than it offered (services/bench_runs/kept.py)."""
    return 0 < rates_measured(run) < rates_offered(run)


def max_goodput_rate(run: BenchRun) -> float | str | None:
    return (run.result or {}).get("max_goodput_rate")


def curve(run: BenchRun) -> dict[str, Any]:
    """A partial run says so in its label too, the chart's legend being all a reader sees."""
    cut = partial(run)
    name = label(run)
    if cut:
        name += f" (partial: {rates_measured(run)} of {rates_offered(run)} rates)"
    return {
        "id": run.id,
        "deployment": run.deployment,
        "revision": run.revision,
        "label": name,
        "status": run.status,
        "topology": run.topology,
        "partial": cut,
        "rates_offered": rates_offered(run),
        "max_goodput_rate": max_goodput_rate(run),
        "goodput_share": (run.result or {}).get("goodput_share"),
        "points": points(run.result),
    }
