"""What `make bench-proxy` prints: its rows, the TTFT each path adds over its paired direct runs,
and the ratios (CPU against pdctl, the breakdown's and the canary's cost), all from one run.

Pure: the rows come in measured. Each path's round is run back to back with a direct round (the
order alternating by round), so a path's added TTFT at p50 is the median over rounds of its
round's p50 minus the paired direct round's: noise that moves both runs of a pair cancels. At
p99 one round says little (200 requests: its p99 is its second slowest, one arrival burst
queueing on the stand-ins), and a pair's direct run adds its own tail noise rather than
cancelling any, so the p99 is read over all rounds pooled (each round with its own seed: the
tail is many bursts rather than copies of one) against one baseline for every row, all the
direct runs pooled: two rows' added p99 then differ by exactly their own p99s' difference.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from benchmarks.proxy import saturation as proxy_saturation
from domain.measures.slo import percentile

# the rows the ratios read, by name (benchmarks/proxy/bench.py runs them)
PDCTL, ROUTER, NO_PARTS, CANARY = "pdctl", "vllm-router", "pdctl no-parts", "pdctl canary"
COLOCATED = ("pdctl colocated", "vllm-router colocated")


@dataclass
class Row:
    name: str
    result: dict
    cpu: float | None  # proxy CPU-seconds over the measured run
    # per round: TTFT p50 minus that of the direct round paired with it, ms
    paired: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)  # s, every answered request of its runs
    direct_ttfts: list[float] = field(default_factory=list)  # the baseline: all direct runs'

    @property
    def cpu_per_1k(self) -> float | None:
        tokens = self.result["total_output_tokens"]
        return None if self.cpu is None or not tokens else self.cpu / tokens * 1000

    @property
    def cpu_per_request(self) -> float | None:
        done = self.result["completed"]
        return None if self.cpu is None or not done else self.cpu / done

    @property
    def added(self) -> tuple[float, float] | None:
        """Added TTFT (p50, p99), ms: the median over rounds of the paired p50 differences;
        the pooled p99 of the path's requests minus that of the baseline (`against_direct`)."""
        ours, theirs = percentile(self.ttfts, 99), percentile(self.direct_ttfts, 99)
        if not self.paired or ours is None or theirs is None:
            return None
        return statistics.median(self.paired), (ours - theirs) * 1000


def answered_ttfts(result: dict) -> list[float]:
    """The TTFTs (s) of a `pdctl bench --save-requests` result's answered requests."""
    return [t for t, error in zip(result["ttfts"], result["errors"], strict=True) if not error]


def pair(path: dict, direct: dict) -> float:
    """One round's added TTFT at p50: the path's p50 minus its paired direct run's."""
    return path["median_ttft_ms"] - direct["median_ttft_ms"]


def combine(name: str, runs: list[Row]) -> Row:
    """Medians of the rounds' percentiles; CPU and tokens summed over the rounds."""
    result = dict(runs[0].result)
    for key in ("median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "output_throughput"):
        result[key] = statistics.median(r.result[key] for r in runs)
    for key in ("completed", "failed", "total_output_tokens"):
        result[key] = sum(r.result[key] for r in runs)
    cpu = None if runs[0].cpu is None else sum(r.cpu or 0.0 for r in runs)
    return Row(
        name, result, cpu, [p for r in runs for p in r.paired], [t for r in runs for t in r.ttfts]
    )


def against_direct(rows: list[Row], direct: str = "direct") -> None:
    """Give every row the pooled direct runs as its p99 baseline."""
    base = next(r for r in rows if r.name == direct).ttfts
    for row in rows:
        if row.name != direct:
            row.direct_ttfts = base


def table(rows: list[Row], saturation: dict[str, proxy_saturation.Saturation]) -> str:
    ours = next((r for r in rows if r.name == PDCTL), None)
    lines = [
        f"{'path':<22} {'ok/fail':>8} {'tok/s':>7} {'CPU-s/1k tok':>12} {'TTFT p50':>9} "
        f"{'TTFT p99':>9} {'+p50 ms':>8} {'+p99 ms':>8} {'ITL p50':>8} {'CPU/pdctl':>9} "
        f"{'sat tok/s/core':>14}",
    ]
    for row in rows:
        r = row.result
        added = row.added
        cpu = row.cpu_per_1k
        ratio = f"{cpu / ours.cpu_per_1k:9.2f}" if cpu and ours and ours.cpu_per_1k else f"{'-':>9}"
        sat = saturation.get(row.name)
        per_core = f"{sat.per_core:.0f}" if sat and sat.per_core else "-"
        lines.append(
            f"{row.name:<22} {r['completed']:>4}/{r['failed']:<3} {r['output_throughput']:7.0f} "
            f"{'-' if cpu is None else f'{cpu:.4f}':>12} {r['median_ttft_ms']:9.2f} "
            f"{r['p99_ttft_ms']:9.2f} {'-' if added is None else f'{added[0]:.2f}':>8} "
            f"{'-' if added is None else f'{added[1]:.2f}':>8} "
            f"{r['median_itl_ms']:8.2f} {ratio} {per_core:>14}"
        )
    lines.append(
        "TTFT columns in ms; +p50/+p99: added over direct (colocated stand-in, no proxy): "
        "+p50 the median over rounds of each round minus the direct round run beside it, "
        "+p99 over all rounds' requests pooled, against all direct runs pooled; PD rows "
        "include the hand-off itself (prefill leg + KV pull + the decode's first step), the "
        "colocated rows only the hop. sat tok/s/core: tokens per second per proxy core at "
        "saturation (wrk through the proxy to a fixed SSE upstream)."
    )
    return "\n".join(lines)


def ratios(rows: list[Row], check_s: float | None) -> str:
    """The lines that judge the run: pdctl against the router, and what the breakdown and the
    canary cost on the request path; `check_s` is the canary check's CPU per request."""
    by = {r.name: r for r in rows}
    ours, lines = by.get(PDCTL), []
    if ours is None or not ours.cpu_per_1k:
        return ""
    for name, what in (
        (ROUTER, "pdctl / vllm-router CPU per 1k tokens"),
        ("baseline", "pdctl / baseline CPU per 1k tokens"),
        (NO_PARTS, "the TTFT breakdown's cost: pdctl / pdctl no-parts CPU"),
        (CANARY, "every request a canary: pdctl canary / pdctl CPU"),
    ):
        other = by.get(name)
        if other is None or not other.cpu_per_1k:
            continue
        value = (
            other.cpu_per_1k / ours.cpu_per_1k
            if name == CANARY
            else ours.cpu_per_1k / other.cpu_per_1k
        )
        lines.append(f"{what}: {value:.3f}")
    if check_s is not None and ours.cpu_per_request:
        lines.append(
            f"the canary check every request pays (connector/canary.mark on the request's "
            f"headers): {check_s * 1e6:.2f} us = {check_s / ours.cpu_per_request:.2%} of "
            f"pdctl's {ours.cpu_per_request * 1e6:.0f} us CPU per request"
        )
    lines += _added_against_router(by)
    return "\n".join(lines)


def _added_against_router(by: dict[str, Row]) -> list[str]:
    """pdctl's paired added TTFT minus the router's (PD, and the colocated hop), ms."""
    lines = []
    for ours, theirs in ((PDCTL, ROUTER), COLOCATED):
        a, b = by.get(ours), by.get(theirs)
        if a is None or a.added is None:
            continue
        line = (
            f"{ours}: added TTFT p50 {a.added[0]:+.2f} / p99 {a.added[1]:+.2f} ms "
            f"(rounds: {_spread(a)})"
        )
        if b is not None and b.added is not None:
            line += (
                f"; minus {theirs}'s: p50 {a.added[0] - b.added[0]:+.2f} / "
                f"p99 {a.added[1] - b.added[1]:+.2f} ms ({theirs} rounds: {_spread(b)})"
            )
        lines.append(line)
    return lines


def _spread(row: Row) -> str:
    """The rounds' paired p50 differences, least to most: the noise a reader judges by."""
    return " ".join(f"{p:+.1f}" for p in sorted(row.paired))
