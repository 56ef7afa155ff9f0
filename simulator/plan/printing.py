"""How `pdctl plan` prints its results: rich tables for people, JSON with --json."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table


def emit_fidelity(result: dict, as_json: bool, console: Console) -> None:
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    table = Table("figure", "published", "model", "error", "judged", title="Fidelity")
    source = None
    for r in result["fidelity"]:
        if r["source"] != source:
            source = r["source"]
            table.add_row(f"[bold]{source}[/bold]", "", "", "", "")
        table.add_row(
            r["figure"],
            str(r["published"]),
            str(r["model"]),
            r["error"],
            "yes" if r["judged"] else "no: fitted to it",
        )
    console.print(table)
    console.print(
        f"{result['judged']} figures judged; counts are means and TTFT percentiles medians "
        f"over {result['seeds']} seeded arrival sequences; fitted (not judged): "
        + ", ".join(result["fitted"])
    )


def emit(result: dict, as_json: bool, console: Console) -> None:
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=str))
        return
    layouts = result.get("layouts", {})
    if "ranked" in result:
        table = Table(
            "config", "max_goodput_rate", "attainment at top rate", "fails on", "nodes; hand-off"
        )
        for r in result["ranked"]:
            table.add_row(
                r["config"],
                str(r["max_goodput_rate"]),
                f"{r['attainment_at_top_rate']:.0%}",
                r["failed_target_at_top_rate"],
                layout_text(layouts.get(r["config"])),
            )
        console.print(table)
        console.print(result["reason"])
        return
    if "saturation" in result:
        table = Table("config", "GPUs", "duration s", "total tok/s", "output tok/s")
        for r in result["saturation"]:
            table.add_row(
                r["config"],
                str(r["gpus"]),
                str(r["duration_s"]),
                str(r["total_tokens_per_s"]),
                str(r["output_tokens_per_s"]),
            )
        console.print(table)
        console.print(result.get("verdict", ""))
        return
    table = Table(
        "config",
        "rate",
        "met TTFT",
        "met ITL",
        "met both",
        "TTFT p50/p99 ms",
        "ITL p50/p99 ms",
        "fails on",
        *(["published"] if "published" in result["rows"][0] else []),
    )
    for r in result["rows"]:
        cells = [
            r["config"],
            f"{r['rate']:g}",
            f"{r['met_ttft']}/{r['requests']}",
            f"{r['met_itl']}/{r['requests']}",
            f"{r['met_both']}/{r['requests']}",
            f"{r['p50_ttft_ms']:.0f} / {r['p99_ttft_ms']:.0f}",
            f"{r['p50_itl_ms']:.1f} / {r['p99_itl_ms']:.1f}",
            r["failed_target"],
        ]
        if "published" in r:
            cells.append(str(r["published"]))
        table.add_row(*cells)
    console.print(table)
    for name, best in result["max_goodput_rate"].items():
        console.print(
            f"max_goodput_rate {name}: {best} req/s (>= {result['goodput_share']:.0%} meet both)"
        )
    for name, where in layouts.items():
        console.print(f"{name}: {layout_text(where)}")
    for role, text in result.get("engine_defaults", {}).items():
        console.print(f"{role} runs with vLLM's defaults: {text}")
    for entry in result.get("calibration", []):
        if entry.get("calibrated"):
            console.print(f"timing {entry['fitted_to'][0]}")
    if "published_rate" in result:
        emit_published(result, console)
    if "wall_s" in result:
        console.print(f"(simulated in {result['wall_s']} s)")
    if "sweep_wall_s" in result:
        console.print(
            f"(sweep: {len(result['rows'])} runs in {result['sweep_wall_s']} s; "
            f"published rate x {result['published_rate']['seeds']} seeds in "
            f"{result['published_rate_wall_s']} s)"
        )


def emit_published(result: dict, console: Console) -> None:
    report = result["published_rate"]
    seeds = report["seeds"]
    table = Table(
        "config",
        f"met both: mean (min-max) of {seeds} seeds",
        "published",
        "fail TTFT only / ITL only (mean)",
        "published ",
        "TTFT p50/p90/p99/max s (median of seeds)",
        "published  ",
        f"per-request ITL {report['itl_stat']} (seed 0)",
        "published   ",
        title=f"At {report['rate']:g} req/s, beside the MORI-IO post",
    )
    for name, c in report["configs"].items():
        pub = c["published"] or {}
        ttft = c["ttft_s"]
        table.add_row(
            name,
            spread_text(c["met_both"]),
            str(pub.get("met_both", "-")),
            f"{c['fail_ttft_only']['mean']:g} / {c['fail_itl_only']['mean']:g}",
            f"{pub.get('fail_ttft_only', '-')} / {pub.get('fail_itl_only', '-')}",
            " / ".join(f"{ttft[k]:.3f}" for k in ("p50", "p90", "p99", "max")),
            " / ".join(f"{pub['ttft_s'][k]:.3f}" for k in ("p50", "p90", "p99", "max"))
            if pub
            else "-",
            c["seed0"]["itl_clusters"],
            pub.get("itl_clusters", "-"),
        )
    console.print(table)
    stats = Table(
        "config",
        *(f"met both, per-request ITL {s}" for s in ("p99", "mean", "max")),
        title="The same runs judged under each per-request ITL statistic",
    )
    for name, c in report["configs"].items():
        by = c["met_both_by_itl_stat"]
        stats.add_row(name, *(spread_text(by[s]) for s in ("p99", "mean", "max")))
    console.print(stats)
    for check in result["checks"]:
        console.print(("holds  " if check["holds"] else "FAILS  ") + check["claim"])


def spread_text(spread: dict) -> str:
    return f"{spread['mean']:g} ({spread['min']}-{spread['max']})"


def layout_text(layout: dict | None) -> str:
    """`P0 on node 0; D0 on node 1; hand-off inter-node rdma 200 GB/s (P0->D0)`."""
    if not layout:
        return ""
    parts = [layout["nodes"]]
    for h in layout.get("handoffs", ()):
        pairs = ", ".join(h["pairs"][:4]) + (" ..." if len(h["pairs"]) > 4 else "")
        parts.append(f"hand-off {h['link']} {h['path']} {h['gbps']:g} GB/s ({pairs})")
    return "; ".join(parts)
