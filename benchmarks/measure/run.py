"""`make bench-measure`: does `pdctl bench` measure what vLLM's own client measures?

Both clients against the same stand-in servers and workload, in one run: 256 in / 64 out
completions, a seed per round, at several rates, for the direct case (a colocated stand-in)
and the proxied one (NIXL prefill and decode stand-ins behind `pdctl proxy`; benchmarks/
measure_runs.py). vLLM's client is `vllm bench serve` in the real-vLLM venv
(benchmarks/measure/vllm_client.py, with a tokenizer that counts the stand-in's way); `pdctl bench
--arrivals vllm` offers the same arrival times. Per case and rate, rounds of three runs
(vLLM, pdctl, vLLM) interleave the clients, and each client's own per-request figures are
pooled over the rounds (benchmarks/measure/client_records.py): pdctl against vLLM's first runs is
the difference, vLLM's other runs against its first ones the A/A noise floor. The runs of a
round offer the same requests at the same times, so their TTFTs are also compared request by
request (the median of those differences is a client's own offset, without the server's
run-to-run noise). Prompt lengths are the server's count (`usage.prompt_tokens`, which both
clients record per request). Servers are pinned to one core, the clients to the other.
Without the vLLM venv it says how to get it and skips. Environment: BENCH_MEASURE_RATES
(default 3,6,12), BENCH_MEASURE_SECONDS (arrivals per run, default 5 s; at least 30
requests), BENCH_MEASURE_ROUNDS (default 4), BENCH_MEASURE_CASES (default
"rates,tokenizer"; "tokenizer" alone runs only the last case). Last, the issue's setup:
vLLM's client with the tiny Llama's own tokenizer against a stand-in given it
(benchmarks/measure/model_tokenizer.py).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.measure import model_tokenizer
from benchmarks.measure.client_records import Pooled, paired
from benchmarks.measure.runs import INPUT_LEN, OUTPUT_LEN, SEED, Clients, start_servers
from benchmarks.measure.vllm_client import (
    HOW_TO_GET_IT,
    VllmBenchServe,
    tiny_llama,
    vllm_python,
    write_standin_tokenizer,
)
from benchmarks.proxy.bench import LOAD_CORE, PROXY_CORE, pinned
from domain.measures.slo import percentile

RATES = [float(r) for r in os.environ.get("BENCH_MEASURE_RATES", "3,6,12").split(",")]
SECONDS = float(os.environ.get("BENCH_MEASURE_SECONDS", "5"))
CASES = set(os.environ.get("BENCH_MEASURE_CASES", "rates,tokenizer").split(","))
ROUNDS = int(os.environ.get("BENCH_MEASURE_ROUNDS", "4"))  # even: a and b lead equally often
MIN_PROMPTS = 30
METRICS = [(f"{stat}_{name}_ms") for name in ("ttft", "itl", "tpot") for stat in ("median", "p99")]
# The Must-show targets: |median TTFT| <= 1 ms, |p99 TTFT| <= 3 ms, |p99 ITL| <= 10%
TTFT_P50_MS, TTFT_P99_MS, ITL_P99_SHARE = 1.0, 3.0, 0.10


def prompts_at(rate: float) -> int:
    return max(MIN_PROMPTS, round(rate * SECONDS))


def difference(ours: dict, theirs: dict) -> dict:
    return {key: ours[key] - theirs[key] for key in METRICS}


@dataclass
class Comparison:
    """One case at one rate: each client's requests pooled over the rounds."""

    case: str
    rate: float
    prompts: int
    vllm: Pooled = field(default_factory=Pooled)
    pdctl: Pooled = field(default_factory=Pooled)
    vllm_again: Pooled = field(default_factory=Pooled)

    def pdctl_minus_vllm(self) -> dict[str, float]:
        return difference(self.pdctl.stats(), self.vllm.stats())

    def paired_ms(self) -> tuple[float, float]:
        """Medians of the per-request TTFT differences: pdctl minus vLLM, and vLLM's A/A."""
        pdctl, again = (
            (percentile(paired(ours, self.vllm), 50) or 0.0) * 1000
            for ours in (self.pdctl, self.vllm_again)
        )
        return pdctl, again

    def same_prompts(self) -> bool:
        return self.vllm.lengths() == self.pdctl.lengths() == f"{INPUT_LEN}"

    def itl_share(self) -> float:
        return self.pdctl_minus_vllm()["p99_itl_ms"] / self.vllm.stats()["p99_itl_ms"]

    def met(self) -> bool:
        d = self.pdctl_minus_vllm()
        return (
            abs(d["median_ttft_ms"]) <= TTFT_P50_MS
            and abs(d["p99_ttft_ms"]) <= TTFT_P99_MS
            and abs(self.itl_share()) <= ITL_P99_SHARE
            and self.same_prompts()
        )


def measure(clients: Clients, urls: dict[str, str]) -> tuple[list[Comparison], dict[str, dict]]:
    """Per case and rate, ROUNDS rounds of three runs: vLLM's client (a), `pdctl bench`, vLLM's
    client again (b), a and b swapping places every round, so pdctl's run always sits between
    two vLLM runs and drift on the machine falls on both sides alike. Each round has its own
    seed (the three runs share it): with one seed for all, every round's slowest requests are
    the same arrival burst, and the pooled p99 is a few samples of that one burst."""
    rows = []
    for case, url in urls.items():
        clients.pdctl_run(url, RATES[0], 20, f"{case}-warmup-pdctl")  # warm both paths
        clients.vllm_run(url, RATES[0], 20, f"{case}-warmup-vllm")
        for rate in RATES:
            row = Comparison(case, rate, prompts_at(rate))
            for i in range(ROUNDS):
                tag, seed, n = f"{case}-{rate:g}-{i}", SEED + i, row.prompts
                first, last = ("a", "b") if i % 2 == 0 else ("b", "a")
                pooled = {"a": row.vllm, "b": row.vllm_again}
                pooled[first].add(clients.vllm_run(url, rate, n, f"{tag}-vllm-{first}", seed=seed))
                row.pdctl.add(clients.pdctl_run(url, rate, n, f"{tag}-pdctl", seed))
                pooled[last].add(clients.vllm_run(url, rate, n, f"{tag}-vllm-{last}", seed=seed))
            rows.append(row)
            print(f"  {case} @ {rate:g} req/s: {ROUNDS} x {row.prompts} requests", flush=True)
    return rows, diagnose(clients, urls["direct"])


def diagnose(clients: Clients, url: str) -> dict[str, dict]:
    """Two causes of a difference, shown on the direct stand-in at the middle rate: vLLM's
    client with the tiny Llama's tokenizer against a stand-in without it (it estimates: the
    baseline of model_tokenizer.py's case), and vLLM's client with aiohttp's trust_env on (as it
    ships) and off, in alternating rounds: with it on, aiohttp looks up proxies and ~/.netrc in
    the environment inside every request's TTFT (pdctl's session does not)."""
    rate = RATES[len(RATES) // 2]
    n, found = prompts_at(rate), {}
    if (llama := tiny_llama()) is not None:
        found["llama"] = clients.vllm_run(url, rate, n, "llama", llama)
    pooled = {True: Pooled(), False: Pooled()}
    for i in range(ROUNDS):
        for trust_env in (True, False) if i % 2 == 0 else (False, True):
            tag = f"trust-env-{'on' if trust_env else 'off'}-{i}"
            pooled[trust_env].add(clients.vllm_run(url, rate, n, tag, trust_env=trust_env))
    found["env_on"], found["env_off"] = (
        {**pooled[k].stats(), "n": len(pooled[k].ttft)} for k in (True, False)
    )
    return {key: {**value, "rate": rate} for key, value in found.items()}


def table(rows: list[Comparison], diagnosis: dict[str, dict]) -> str:
    head = ["TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50", "TPOT p99"]
    lines = [
        f"{'case':<8} {'rate':>5} {'n':>5} {'row':<11} "
        + " ".join(f"{h:>9}" for h in head)
        + f" {'prompt tok':>10}  verdict"
    ]

    def line(row: Comparison, label: str, values: dict, n: int, tokens: str, verdict="") -> str:
        signed = label in ("pdctl-vllm", "A/A")
        cells = " ".join(f"{values[k]:>+9.2f}" if signed else f"{values[k]:>9.2f}" for k in METRICS)
        text = f"{row.case:<8} {row.rate:>5g} {n:>5} {label:<11} {cells} {tokens:>10}  {verdict}"
        return text.rstrip()

    for row in rows:
        verdict = ("met" if row.met() else "MISSED") + f" (ITL p99 {row.itl_share():+.1%})"
        aa = difference(row.vllm_again.stats(), row.vllm.stats())
        lines += [
            line(row, "vllm", row.vllm.stats(), len(row.vllm.ttft), row.vllm.lengths()),
            line(row, "pdctl", row.pdctl.stats(), len(row.pdctl.ttft), row.pdctl.lengths()),
            line(
                row, "pdctl-vllm", row.pdctl_minus_vllm(), len(row.pdctl.ttft),
                "same" if row.same_prompts() else "DIFFER", verdict,
            ),
            line(row, "A/A", aa, len(row.vllm_again.ttft), row.vllm_again.lengths()),
        ]  # fmt: skip
    lines.append(
        "TTFT paired by arrival (the same request in the same round; median of the per-request "
        "differences, ms): "
        + "; ".join(
            f"{row.case} @ {row.rate:g} pdctl-vllm {ours:+.2f}, A/A {again:+.2f}"
            for row in rows
            for ours, again in [row.paired_ms()]
        )
    )
    lines.append(
        f"ms, each client's own per-request figures pooled over {ROUNDS} interleaved rounds "
        f"(n: successful requests); prompt tok: usage.prompt_tokens of every request as the "
        f"server counted them; verdict: |TTFT p50| <= {TTFT_P50_MS:g} ms, |TTFT p99| <= "
        f"{TTFT_P99_MS:g} ms, |ITL p99| <= {ITL_P99_SHARE:.0%}, the same prompt lengths; A/A: "
        f"vLLM's client's other runs in the same rounds minus its first ones."
    )
    if (issue := diagnosis.get("llama")) is not None:
        counted = issue.get("input_lens") or [0]
        lines.append(
            f"vLLM's client with the tiny Llama's tokenizer against a stand-in without it, direct@"
            f" {issue['rate']:g} req/s: the server counted {sum(counted) / len(counted):.0f} "
            f"prompt tokens of the {INPUT_LEN} asked; TTFT p50 {issue['median_ttft_ms']:.2f} "
            f"ms, ITL p99 {issue['p99_itl_ms']:.2f} ms."
        )
    if (on := diagnosis.get("env_on")) and (off := diagnosis.get("env_off")):
        lines.append(
            f"vLLM's client with aiohttp's trust_env on (as shipped) / off, alternating rounds, "
            f"direct @ {on['rate']:g} req/s ({on['n']} requests each): TTFT p50 "
            f"{on['median_ttft_ms']:.2f} / {off['median_ttft_ms']:.2f} ms, p99 "
            f"{on['p99_ttft_ms']:.2f} / {off['p99_ttft_ms']:.2f} ms: with it on, aiohttp looks "
            f"up proxies and ~/.netrc inside each request's TTFT (pdctl's session does not)."
        )
    return "\n".join(lines)


def main() -> None:
    python = vllm_python()
    if python is None:
        print(f"bench-measure: skipped, no real-vLLM venv; {HOW_TO_GET_IT}")
        return
    began = time.monotonic()
    logs = Path(tempfile.mkdtemp(prefix="bench-measure-"))
    print(
        f"bench-measure: {INPUT_LEN} in / {OUTPUT_LEN} out, seeds {SEED}-{SEED + ROUNDS - 1}, "
        f"rates {', '.join(f'{r:g}' for r in RATES)} req/s; servers on core {PROXY_CORE}, clients "
        f"on core {LOAD_CORE}; logs in {logs}",
        flush=True,
    )
    tokenizer = write_standin_tokenizer(logs / "standin-tokenizer")
    vllm = VllmBenchServe(python, logs / "vllm-client.log", pinned(LOAD_CORE))
    rows: list[Comparison] = []
    diagnosis: dict[str, dict] = {}
    try:
        clients = Clients(vllm, tokenizer, logs)
        if "rates" in CASES:
            servers, urls = start_servers(logs)
            try:
                rows, diagnosis = measure(clients, urls)
            finally:
                for server in servers:
                    server.stop()
        llama = tiny_llama() if "tokenizer" in CASES else None
        case = None if llama is None else model_tokenizer.measure(clients, logs, llama, ROUNDS)
    finally:
        vllm.close()
    if rows:
        print(table(rows, diagnosis))
    if case is None:
        print(f"the tiny Llama's tokenizer case: skipped, no tiny Llama; {HOW_TO_GET_IT}")
    else:
        print("\n".join(model_tokenizer.lines(case, diagnosis.get("llama"))))
    met = all(row.met() for row in rows) and (case is None or case.met())
    wall = time.monotonic() - began
    print(f"targets met at every rate: {'yes' if met else 'no'}; wall {wall:.0f} s")


if __name__ == "__main__":
    main()
