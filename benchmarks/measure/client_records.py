"""Per-request measurements out of either client's result file, pooled over the rounds of
`make bench-measure`: vLLM's `--save-detailed` lists and `pdctl bench --save-requests`
lists carry the same things (seconds), so both are read into one shape and summarized with
one percentile (numpy's linear one, which both clients use for their own summaries).

Both files list requests in arrival order (vLLM gathers its tasks in the order it made them,
pdctl writes records by index), and two clients' runs in one round offer the same seeded
arrivals and prompts, so the i-th requests of two such runs are the same request: `paired`
compares them one by one. Its median is a client's own offset, free of the server's
run-to-run noise that a pooled p99 carries (at 12 req/s a p99 over a few hundred requests is
the few slowest, which are one arrival burst queueing on the server)."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.measures.slo import percentile


@dataclass
class Pooled:
    """Every successful request of one client's runs: TTFT, each gap, TPOT, prompt tokens."""

    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    failed: int = 0
    runs: list[list[float | None]] = field(default_factory=list)  # TTFT per request, per run

    def add(self, result: dict) -> None:
        """One run's result file, from either client (the lists both write per request)."""
        rows = zip(
            result["errors"],
            result["ttfts"],
            result["itls"],
            result["latencies"],
            result["output_lens"],
            result["input_lens"],
            strict=True,
        )
        run: list[float | None] = []
        self.runs.append(run)
        for error, ttft, itl, latency, output, prompt in rows:
            run.append(None if error else ttft)
            if error:
                self.failed += 1
                continue
            self.ttft.append(ttft)
            self.itl.extend(itl)
            if output > 1:  # vLLM's TPOT: (latency - ttft) / (output tokens - 1)
                self.tpot.append((latency - ttft) / (output - 1))
            self.prompt_tokens.append(prompt)

    def stats(self) -> dict[str, float]:
        """p50 and p99 of TTFT, ITL and TPOT in ms, keyed as vLLM's result fields are."""
        out = {}
        for name, seconds in (("ttft", self.ttft), ("itl", self.itl), ("tpot", self.tpot)):
            out[f"median_{name}_ms"] = (percentile(seconds, 50) or 0.0) * 1000
            out[f"p99_{name}_ms"] = (percentile(seconds, 99) or 0.0) * 1000
        return out

    def lengths(self) -> str:
        """The prompt lengths the server counted, as `256` or `67-84`."""
        if not self.prompt_tokens:
            return "-"
        low, high = min(self.prompt_tokens), max(self.prompt_tokens)
        return f"{low}" if low == high else f"{low}-{high}"


def paired(ours: Pooled, theirs: Pooled) -> list[float]:
    """Per request, our TTFT minus theirs (seconds), run i of ours against run i of theirs:
    the requests both answered, matched by their place in arrival order."""
    if len(ours.runs) != len(theirs.runs):
        raise ValueError(f"{len(ours.runs)} runs against {len(theirs.runs)}: not one per round")
    gaps = []
    for mine, other in zip(ours.runs, theirs.runs, strict=True):
        if len(mine) != len(other):
            raise ValueError(f"a run of {len(mine)} requests against one of {len(other)}")
        gaps += [a - b for a, b in zip(mine, other, strict=True) if a is not None and b is not None]
    return gaps
