"""Showing a bench result: the `--result-json` document and the rich tables.

A single rate writes vLLM's flat result document; a sweep writes one such document per rate
under `runs` with `max_goodput_rate` beside them; while a sweep runs, the rates measured so far
are in the file with `partial` (so a sweep stopped part-way keeps them). JSON has no infinity,
so rate `inf` is written as the string "inf".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Table

from bench.records import RequestRecord
from bench.summary import sweep_result


def result_document(
    summaries: Sequence[dict[str, Any]],
    records: Sequence[Sequence[RequestRecord]],
    share: float,
    save_requests: bool,
) -> dict[str, Any]:
    """What `--result-json` holds; per-request records only with `--save-requests`."""
    runs = _runs(summaries, records, save_requests)
    sweep = sweep_result(runs, share)
    if len(runs) == 1:
        document = dict(runs[0])
        document["goodput_share"] = share
        document["max_goodput_rate"] = sweep["max_goodput_rate"]
        return json_safe(document)
    return json_safe(sweep)


def partial_document(
    summaries: Sequence[dict[str, Any]],
    records: Sequence[Sequence[RequestRecord]],
    share: float,
    save_requests: bool,
    rates: int,
) -> dict[str, Any]:
    """What `--result-json` holds while a sweep runs: the rates measured so far, in a sweep's
    shape even for one, and `partial` saying how many of how many rates; max_goodput_rate is
    over the rates measured."""
    document = sweep_result(_runs(summaries, records, save_requests), share)
    document["partial"] = {"rates_done": len(summaries), "rates": rates}
    return json_safe(document)


def _runs(
    summaries: Sequence[dict[str, Any]],
    records: Sequence[Sequence[RequestRecord]],
    save_requests: bool,
) -> list[dict[str, Any]]:
    runs = []
    for summary, run_records in zip(summaries, records, strict=True):
        run = dict(summary)
        if save_requests:
            run.update(request_details(run_records))
        runs.append(run)
    return runs


# what request_details adds to a rate's summary (--save-requests)
REQUEST_DETAIL_KEYS = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "errors",
    "requests",
)


def request_details(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """vLLM's per-request lists (seconds) plus our records, so either kind of reader works."""
    return {
        "input_lens": [r.prompt_tokens for r in records],
        "output_lens": [r.output_tokens for r in records],
        "ttfts": [r.ttft for r in records],
        "itls": [r.itl for r in records],
        "latencies": [r.e2el for r in records],
        "errors": [r.error for r in records],
        "requests": [r.to_json() for r in records],
    }


def json_safe(value: Any) -> Any:
    """Replace infinities (rate `inf`) by the string "inf", recursively."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def rate_label(rate: float | None) -> str:
    if rate is None:
        return "none"
    return "inf" if math.isinf(rate) else f"{rate:g}"


def summary_table(summary: dict[str, Any]) -> Table:
    """The run at one rate, laid out like `vllm bench serve`'s printout."""
    table = Table(title=f"pdctl bench @ {rate_label(summary['request_rate'])} req/s")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows: list[tuple[str, str]] = [
        ("Successful requests", f"{summary['completed']}"),
        ("Failed requests", f"{summary['failed']}"),
        ("  of them rejected (503, 429)", _rejected(summary)),
        ("Benchmark duration (s)", f"{summary['duration']:.2f}"),
        ("Total input tokens", f"{summary['total_input_tokens']}"),
        ("Total generated tokens", f"{summary['total_output_tokens']}"),
        ("Request throughput (req/s)", f"{summary['request_throughput']:.2f}"),
        ("Request goodput (req/s)", f"{summary['request_goodput']:.2f}"),
        ("Output token throughput (tok/s)", f"{summary['output_throughput']:.2f}"),
        ("Total token throughput (tok/s)", f"{summary['total_token_throughput']:.2f}"),
    ]
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        for stat in ("mean", "median", "p99"):
            value = summary[f"{stat}_{name}_ms"]
            rows.append((f"{stat.capitalize()} {label} (ms)", f"{value:.2f}"))
    rows += [
        ("SLO attainment", f"{summary['slo_attainment']:.1%}"),
        ("ITL SLO statistic", summary["itl_slo_stat"]),
        ("Met TTFT and ITL", f"{summary['met_both']}"),
        ("Event loop lag max / p99 (ms)", _lag(summary)),
    ]
    for metric, value in rows:
        table.add_row(metric, value)
    return table


def _rejected(summary: dict[str, Any]) -> str:
    """A stored run from before the count says so rather than 0."""
    if "rejected" not in summary:
        return "not counted"
    return f"{summary['rejected']} ({summary['rejected_share']:.1%} of requests)"


def sweep_table(document: dict[str, Any]) -> Table:
    """Rate against attainment and goodput, the view that finds max_goodput_rate."""
    share = document["goodput_share"]
    best = rate_label(_rate(document["max_goodput_rate"]))
    table = Table(
        title=f"sweep: max_goodput_rate {best} req/s (slo_attainment >= {share:.0%})",
        box=box.SIMPLE_HEAD,
    )
    for column in ("rate", "ok/failed", "rejected", "slo_attainment", "request_goodput"):
        table.add_column(column, justify="right", no_wrap=True)
    for column in ("p99 TTFT ms", "p99 ITL ms", "loop lag ms"):
        table.add_column(column, justify="right")
    for run in document["runs"]:
        table.add_row(
            rate_label(_rate(run["request_rate"])),
            f"{run['completed']}/{run['failed']}",
            f"{run['rejected_share']:.1%}" if "rejected_share" in run else "-",
            f"{run['slo_attainment']:.1%}",
            f"{run['request_goodput']:.2f}",
            f"{run['p99_ttft_ms']:.1f}",
            f"{run['p99_itl_ms']:.1f}",
            _lag(run, max_only=True),
        )
    return table


def lag_warning(summary: dict[str, Any]) -> str | None:
    """A line for runs whose own loop lag could have bent the ITL figures; with several
    workers it names the worst one (each worker's figures are in the result)."""
    if not summary.get("event_loop_lag_flagged"):
        return None
    where = "the bench's event loop"
    per_worker = summary.get("event_loop_lag_per_worker") or []
    if per_worker:
        worst = max(per_worker, key=lambda w: max(w["max_ms"], w["late_start_ms"]))
        where = f"the event loop of worker {worst['worker']} of {len(per_worker)}"
    return (
        f"warning: at {rate_label(_rate(summary['request_rate']))} req/s {where} "
        f"ran up to {summary['event_loop_lag_max_ms']:.1f} ms late, more than 10% of the "
        f"{summary['slo_itl_ms']:g} ms ITL target; its ITL figures are not to be trusted"
    )


def _lag(summary: dict[str, Any], max_only: bool = False) -> str:
    text = f"{summary['event_loop_lag_max_ms']:.2f}"
    if not max_only:
        text += f" / {summary['event_loop_lag_p99_ms']:.2f}"
    return text + (" (!)" if summary.get("event_loop_lag_flagged") else "")


def _rate(value: float | str | None) -> float | None:
    """A rate as a result holds it: a number, None, or "inf" (JSON has no infinity)."""
    return float(value) if isinstance(value, str) else value
