"""The advisor: the seeds' "should I disaggregate?" decision table as rules over measured data.

Each rule reads named signals (from live proxy and engine metrics, a bench result, or a
plan result), and answers with a verdict, the numbers behind it and the signals it used.
A rule whose signals are absent says so instead of guessing. A rule that reads the traffic
decides nothing from a window that is no evidence (a change ran in it, or too few real
requests: domain/measures/evidence.py): its verdict is None and its advice says "not enough evidence
(why)". The two correctness rules keep their own evidence rules (the PD check's request
minimum and its grace after any rollout; the canary's own probes) and still judge. Pure: a
dict in, verdicts out.

Signals (all optional):
  topology                "colocated" | "disaggregated"
  slo_ttft_ms, slo_itl_ms the targets
  ttft_p99_ms, itl_p99_ms measured (client-side: proxy or bench)
  itl_p50_ms              measured
  spike_prefill_overlap   share of ITL spikes (> 2x median) whose step carried prefill work
  prompt_tokens_mean      mean prompt length
  output_tokens_mean      mean answer length (frontend_cpu reads it; the planner's forecast too)
  concurrency_mean        mean requests in flight (running)
  kv_transfer_gbps        measured or derived KV throughput during transfers
  transfer_share_of_ttft  mean (transfer time / TTFT) on disaggregated requests
  multi_turn_share        share of requests that continue a conversation
  prompt_saved_share      share of prompt tokens pulled back by bidirectional KV (no rule
                          needs it; the bidirectional proposal watches it)
  frontend_cpu_share      share of a core the serving frontend spends tokenizing/parsing
  request_rate            offered req/s
  burstiness              gamma shape of arrivals (1 = Poisson; < 1 burstier)
  prefix_hit_rate         prefix cache hits / queries (tokens)
  slo_attainment          share of requests meeting every target
  pd_recomputing_decodes  decodes recomputing their prompts now (observe/sections/pd_check.py)
  pd_transfer_share       the lowest decode's share of prompt tokens by KV transfer (10 s)
  pd_failed_transfers     failed KV transfers on the decodes over the same 10 s
  canary_failing_pairs    pairs whose canary answer is not the colocated one (observe/canary/)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from domain.engine.frontend_cost import RENDER_WORTH, VLLM_API_SERVER

Signals = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Verdict:
    rule: str
    triggered: bool | None  # None: not enough signal to say
    advice: str
    evidence: dict[str, Any] = field(default_factory=dict)
    signals: tuple[str, ...] = ()
    not_enough_evidence: str | None = None  # why the window decides nothing (None: it does)

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "triggered": self.triggered,
            "advice": self.advice,
            "evidence": self.evidence,
            "signals": list(self.signals),
            "not_enough_evidence": self.not_enough_evidence,
        }


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    needs: tuple[str, ...]
    check: Callable[[Signals], tuple[bool, str, dict[str, Any]]]
    reads: tuple[str, ...] = ()  # optional: used when present, and listed with its source
    traffic: bool = True  # judges the workload: waits for a window that is evidence

    @property
    def signals(self) -> tuple[str, ...]:
        return self.needs + self.reads


def _itl_interference(s: Signals) -> tuple[bool, str, dict]:
    over = s["itl_p99_ms"] > s["slo_itl_ms"]
    aligned = s["spike_prefill_overlap"] >= 0.5
    hit = over and aligned and s.get("topology", "colocated") == "colocated"
    advice = (
        "p99 ITL is over its target and the spikes line up with prefill work: "
        "disaggregate, so decodes never wait behind a prefill"
        if hit
        else "ITL is within target, or its spikes are not caused by prefills"
    )
    return (
        hit,
        advice,
        {
            "itl_p99_ms": s["itl_p99_ms"],
            "slo_itl_ms": s["slo_itl_ms"],
            "spikes_with_prefill": s["spike_prefill_overlap"],
        },
    )


def _ttft_binding(s: Signals) -> tuple[bool, str, dict]:
    ttft_over = s["ttft_p99_ms"] > s["slo_ttft_ms"]
    itl_ok = s["itl_p99_ms"] <= s["slo_itl_ms"]
    hit = ttft_over and itl_ok
    disaggregated = s.get("topology") == "disaggregated"
    advice = (
        "TTFT is the binding constraint (ITL is fine): the prefills are short of capacity; "
        "move an instance from decode to prefill, or widen the prefills' TP"
        if hit and disaggregated
        else "TTFT is the binding constraint (ITL is fine): disaggregation adds transfer "
        "time to TTFT; stay colocated (a wider TP speeds prefills), or measure with "
        "`pdctl plan` first"
        if hit
        else "TTFT is not the only target missed"
    )
    return (
        hit,
        advice,
        {
            "ttft_p99_ms": s["ttft_p99_ms"],
            "slo_ttft_ms": s["slo_ttft_ms"],
            "itl_p99_ms": s["itl_p99_ms"],
        },
    )


def _itl_binding(s: Signals) -> tuple[bool, str, dict]:
    itl_over = s["itl_p99_ms"] > s["slo_itl_ms"]
    ttft_ok = s["ttft_p99_ms"] <= s["slo_ttft_ms"]
    hit = itl_over and ttft_ok and s.get("topology") == "disaggregated"
    advice = (
        "ITL is the binding constraint of this disaggregated deployment (TTFT is fine): the "
        "decodes are short of capacity; move an instance from prefill to decode"
        if hit
        else "ITL is not the only target missed, or the deployment is colocated"
    )
    return (
        hit,
        advice,
        {
            "itl_p99_ms": s["itl_p99_ms"],
            "slo_itl_ms": s["slo_itl_ms"],
            "ttft_p99_ms": s["ttft_p99_ms"],
        },
    )


def _long_prompts(s: Signals) -> tuple[bool, str, dict]:
    long_busy = s["prompt_tokens_mean"] >= 2000 and s["concurrency_mean"] >= 16
    fast = s["kv_transfer_gbps"] >= 10
    hit = long_busy and fast
    advice = (
        "long prompts at high concurrency with a fast KV link: disaggregate"
        if hit
        else "long prompts at high concurrency, but the KV link is slow: fix the link first"
        if long_busy
        else "prompts are short or concurrency is low"
    )
    return (
        hit,
        advice,
        {
            "prompt_tokens_mean": s["prompt_tokens_mean"],
            "concurrency_mean": s["concurrency_mean"],
            "kv_transfer_gbps": s["kv_transfer_gbps"],
        },
    )


def _multi_turn(s: Signals) -> tuple[bool, str, dict]:
    hit = s["multi_turn_share"] >= 0.3
    advice = (
        "chat or agent loops with growing context: disaggregate with bidirectional KV "
        "transfer (decode's KV returns to prefill for the next turn)"
        if hit
        else "little multi-turn traffic"
    )
    return hit, advice, {"multi_turn_share": s["multi_turn_share"]}


def _frontend_cpu(s: Signals) -> tuple[bool, str, dict]:
    """A hot frontend is worth a render tier only where the prompt side (parsing, template,
    tokenizing) is a fair share of it: a streamed answer token costs vLLM's API server ~100x
    a prompt token (domain/engine/frontend_cost.py), and the engines keep the streaming."""
    hot = s["frontend_cpu_share"] >= 0.8
    evidence: dict[str, Any] = {"frontend_cpu_share": s["frontend_cpu_share"]}
    prompt, output = s.get("prompt_tokens_mean"), s.get("output_tokens_mean")
    share = None
    if prompt and output:
        share = VLLM_API_SERVER.render_share(prompt, output)
        evidence["prompt_side_share"] = round(share, 3)
        # what a render instance would carry of it (a render tier is sized from this)
        evidence["render_load_share"] = round(VLLM_API_SERVER.render_load_share(prompt, output), 3)
    if not hot:
        return False, "frontend CPU is not a bottleneck", evidence
    if share is not None and share < RENDER_WORTH:
        return (
            False,
            f"the serving frontend spends most of a core, but mostly streaming answers (the "
            f"prompt side is {share:.0%} of it at {prompt:.0f} in / {output:.0f} out): a render "
            f"tier would not cool it; more API server processes (--api-server-count) would",
            evidence,
        )
    return (
        True,
        "the serving frontend spends most of a core tokenizing and parsing: split off a render "
        "tier",
        evidence,
    )


def _slow_transfer(s: Signals) -> tuple[bool, str, dict]:
    hit = s["transfer_share_of_ttft"] >= 0.3
    advice = (
        "KV transfer is a large share of TTFT: fix the transfer (RDMA, NIC affinity, "
        "UCX settings) or stay colocated"
        if hit
        else "KV transfer is a small part of TTFT"
    )
    return hit, advice, {"transfer_share_of_ttft": s["transfer_share_of_ttft"]}


def _light_traffic(s: Signals) -> tuple[bool, str, dict]:
    low = s["request_rate"] < 1.0
    bursty = s.get("burstiness", 1.0) < 0.5
    short = s["prompt_tokens_mean"] < 512
    hit = low or bursty or short
    reasons = [
        r
        for r, on in (("low rate", low), ("bursty arrivals", bursty), ("short prompts", short))
        if on
    ]
    advice = (
        f"{', '.join(reasons)}: prefills rarely collide with decodes; stay colocated"
        if hit
        else "traffic is heavy enough for interference to matter"
    )
    return (
        hit,
        advice,
        {
            "request_rate": s["request_rate"],
            "burstiness": s.get("burstiness"),
            "prompt_tokens_mean": s["prompt_tokens_mean"],
        },
    )


def _prefix_cache(s: Signals) -> tuple[bool, str, dict]:
    hit = s["prefix_hit_rate"] >= 0.5
    advice = (
        "prefix caching is doing most of the prefill work; MORI-IO runs without it. "
        "Compare both with `pdctl plan --shared-prefix-len N --prefix-caching` and "
        "`--no-prefix-caching` before switching"
        if hit
        else "prefix caching saves little here"
    )
    return hit, advice, {"prefix_hit_rate": s["prefix_hit_rate"]}


def _pd_not_happening(s: Signals) -> tuple[bool, str, dict]:
    recomputing = s["pd_recomputing_decodes"]
    failed = s.get("pd_failed_transfers") or 0
    evidence = {
        "pd_recomputing_decodes": recomputing,
        "pd_transfer_share": s.get("pd_transfer_share"),
        "pd_failed_transfers": s.get("pd_failed_transfers"),
    }
    if not recomputing:
        return False, "every decode receives its prompts' KV by transfer: PD is happening", evidence
    failing = (
        f"transfers fail and fall back to recompute ({failed:g} failed in the last 10 s, "
        "kv_load_failure_policy=recompute): the decode's log names each failure; check the "
        "prefill answers on its side-channel / handshake and notify ports, and that the "
        "decode is not holding a restarted prefill's stale agent"
    )
    causes = [
        "the decode's kv-transfer-config does not match the prefill's (connector name, "
        "kv_role, MoRIIO read_mode against the transfer mode the proxy routes by)",
        'the decode loaded no KV connector at all: vLLM then logs only "Got '
        'kv_transfer_params, but no KVConnector found" and computes the prompt',
        "the prefill's KV expired before the decode pulled it (its lease: NIXL's abort "
        "timeout, 480 s, or kv_lease_duration; MoRIIO's 3600 s), e.g. behind a long decode "
        "queue; the prefill's vllm:*_num_kv_expired_reqs grows",
    ]
    if failed:
        causes.insert(0, failing)
    else:
        causes.append(failing.split(" (")[0] + " (none counted, so less likely)")
    advice = (
        f"{recomputing:g} decode(s) recompute their prompts: PD is not happening there, and "
        "every request pays a local prefill while still answering 200. Likely causes: "
        + "; ".join(f"({i}) {c}" for i, c in enumerate(causes, 1))
    )
    return True, advice, evidence


def _canary_failing(s: Signals) -> tuple[bool, str, dict]:
    failing = s["canary_failing_pairs"]
    evidence = {"canary_failing_pairs": failing}
    if not failing:
        return False, "the canary's answer through the hand-off is the model's own", evidence
    advice = (
        f"{failing:g} pair(s) answer the canary wrongly: answers through them are corrupt while "
        "they still count as 200s and as met SLOs, so attainment and goodput overstate what "
        "users get. Likely causes: (1) KV bytes damaged in transfer (a transport disconnect, "
        "a restarted prefill whose stale blocks were read); (2) prefill and decode disagree "
        "on the KV layout (model revision, dtype, block size, TP); (3) the decode read "
        "another request's blocks. The canary.mismatch event names the pair and the first "
        "differing token; drain that pair until it matches again"
    )
    return True, advice, evidence


RULES = (
    Rule(
        "itl_interference", ("itl_p99_ms", "slo_itl_ms", "spike_prefill_overlap"), _itl_interference
    ),
    Rule(
        "ttft_binding",
        ("ttft_p99_ms", "slo_ttft_ms", "itl_p99_ms", "slo_itl_ms"),
        _ttft_binding,
        reads=("topology",),
    ),
    Rule(
        "itl_binding",
        ("itl_p99_ms", "slo_itl_ms", "ttft_p99_ms", "slo_ttft_ms", "topology"),
        _itl_binding,
    ),
    Rule(
        "long_prompts_high_concurrency",
        ("prompt_tokens_mean", "concurrency_mean", "kv_transfer_gbps"),
        _long_prompts,
    ),
    Rule("multi_turn", ("multi_turn_share",), _multi_turn),
    Rule(
        "frontend_cpu",
        ("frontend_cpu_share",),
        _frontend_cpu,
        reads=("prompt_tokens_mean", "output_tokens_mean"),
    ),
    Rule("slow_kv_transfer", ("transfer_share_of_ttft",), _slow_transfer),
    Rule(
        "light_traffic",
        ("request_rate", "prompt_tokens_mean"),
        _light_traffic,
        reads=("burstiness",),
    ),
    Rule("prefix_cache_heavy", ("prefix_hit_rate",), _prefix_cache),
    Rule(
        "pd_not_happening",
        ("pd_recomputing_decodes",),
        _pd_not_happening,
        reads=("pd_transfer_share", "pd_failed_transfers"),
        traffic=False,
    ),
    Rule("canary_failing", ("canary_failing_pairs",), _canary_failing, traffic=False),
)


def advise(signals: Signals, not_enough: str | None = None) -> list[Verdict]:
    """Every rule's verdict; `not_enough`: why the window is no evidence
    (domain/measures/evidence.py
    `not_enough`), so the rules that read the traffic decide nothing, showing their numbers."""
    verdicts = []
    for rule in RULES:
        missing = [n for n in rule.needs if signals.get(n) is None]
        if missing:
            verdicts.append(
                Verdict(
                    rule.name, None, f"no signal: needs {', '.join(missing)}", signals=rule.signals
                )
            )
            continue
        triggered, advice, evidence = rule.check(signals)
        if not_enough is not None and rule.traffic:
            verdicts.append(
                Verdict(rule.name, None, not_enough, evidence, rule.signals, not_enough)
            )
            continue
        verdicts.append(Verdict(rule.name, triggered, advice, evidence, rule.signals))
    return verdicts
