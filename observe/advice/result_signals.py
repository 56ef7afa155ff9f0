"""The advisor's signals from a written result: one `pdctl bench` run or one row of a
`pdctl plan` result (observe/advice/signals.py derives them from a live frame).

Bench (one run of `--result-json`, vLLM bench's fields): the latency percentiles, SLO
targets, offered rate, burstiness and attainment as written; prompt_tokens_mean =
total_input_tokens / completed; concurrency_mean by Little's law (request_throughput x
mean_e2el); multi_turn_share from the dataset.

Plan (a row of `pdctl plan --json` or POST /api/plan): the row's percentiles, rate and
attainment, the result's SLO; topology from the result's `topologies` (else the config's
label); prompt length, burstiness and independence of requests from its `workload`;
concurrency_mean = output tokens/s x median ITL (requests decoding at once); for
disaggregated rows the modelled link (`links_gbps`) and its transfer time for a mean prompt
(`kv_bytes_per_token`) over the median TTFT.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from observe.advice.derived import Derived

_DISAGG_LABEL = re.compile(r"^\d+P-TP\d+\+\d+D-TP\d+")  # plan_setup.PlanConfig.label
_COLOCATED_LABEL = re.compile(r"^\d+xTP\d+$")


# -- a bench result --------------------------------------------------------------------------


def from_bench(run: Mapping[str, Any], topology: str | None = None) -> Derived:
    """Signals of one `pdctl bench` run (a flat result document, or one of a sweep's runs)."""
    d = Derived()
    d.put("topology", topology, "given with the document", "a bench result does not record it")
    d.put("slo_ttft_ms", _number(run.get("slo_ttft_ms")), "bench SLO", "no TTFT target set")
    d.put("slo_itl_ms", _number(run.get("slo_itl_ms")), "bench SLO", "no ITL target set")
    done = _number(run.get("completed")) or 0
    none_ok = "no request completed"
    for name, key in (
        ("ttft_p99_ms", "p99_ttft_ms"),
        ("itl_p99_ms", "p99_itl_ms"),
        ("itl_p50_ms", "median_itl_ms"),
    ):
        d.put(name, _number(run.get(key)) if done else None, f"bench {key}", none_ok)
    rate = _number(run.get("request_rate"))
    if rate is not None and math.isinf(rate):
        d.put(
            "request_rate",
            _number(run.get("request_throughput")),
            "bench request_throughput (the run offered everything at once)",
        )
    else:
        d.put("request_rate", rate, "bench request_rate (offered)")
    d.put("burstiness", _number(run.get("burstiness")), "bench burstiness")
    d.put("slo_attainment", _number(run.get("slo_attainment")), "bench slo_attainment")
    tokens = _number(run.get("total_input_tokens"))
    d.put(
        "prompt_tokens_mean",
        tokens / done if tokens is not None and done else None,
        "bench total_input_tokens / completed",
        none_ok,
    )
    throughput, e2el = _number(run.get("request_throughput")), _number(run.get("mean_e2el_ms"))
    d.put(
        "concurrency_mean",
        throughput * e2el / 1000 if done and throughput and e2el else None,
        "Little's law: request_throughput x mean_e2el_ms",
        none_ok,
    )
    dataset, turns = run.get("dataset"), _number(run.get("turns"))
    if dataset in ("random", "shared-prefix"):
        d.put("multi_turn_share", 0.0, f"bench dataset {dataset}: independent requests")
    elif dataset == "multi-turn" and turns:
        d.put("multi_turn_share", (turns - 1) / turns, "bench multi-turn dataset, turns")
    else:
        d.miss("multi_turn_share", "the document does not say how its requests relate")
    for name in (
        "spike_prefill_overlap",
        "kv_transfer_gbps",
        "transfer_share_of_ttft",
        "prefix_hit_rate",
        "frontend_cpu_share",
    ):
        d.miss(name, "a client-side bench result does not see the engines")
    return d


# -- a plan result ---------------------------------------------------------------------------


def from_plan(result: Mapping[str, Any], row: Mapping[str, Any]) -> Derived:
    """Signals of one row (a configuration at a rate) of a plan result."""
    d = Derived()
    label = str(row.get("config", ""))
    topology = _mapping(result.get("topologies")).get(label)
    if topology in ("colocated", "disaggregated"):
        d.put("topology", topology, "plan result topologies")
    else:
        topology = (
            "disaggregated"
            if _DISAGG_LABEL.match(label)
            else "colocated"
            if _COLOCATED_LABEL.match(label)
            else None
        )
        d.put(
            "topology",
            topology,
            "plan config label",
            f"the config name {label!r} does not say its layout",
        )
    disaggregated = topology == "disaggregated"
    slo = _mapping(result.get("slo"))
    d.put("slo_ttft_ms", _number(slo.get("ttft_ms")), "plan SLO")
    d.put("slo_itl_ms", _number(slo.get("itl_ms")), "plan SLO")
    for name, key in (
        ("ttft_p99_ms", "p99_ttft_ms"),
        ("itl_p99_ms", "p99_itl_ms"),
        ("itl_p50_ms", "p50_itl_ms"),
    ):
        d.put(name, _number(row.get(key)), f"plan row {key}")
    d.put("request_rate", _number(row.get("rate")), "plan row rate (offered)")
    d.put("slo_attainment", _number(row.get("slo_attainment")), "plan row slo_attainment")
    itl, tokens_per_s = _number(row.get("p50_itl_ms")), _number(row.get("output_throughput"))
    d.put(
        "concurrency_mean",
        tokens_per_s * itl / 1000 if itl and tokens_per_s else None,
        "output tokens/s x median ITL (requests decoding at once)",
    )
    workload = _mapping(result.get("workload"))
    no_workload = "the result carries no workload"
    prompt = _number(workload.get("input_len"))
    if prompt is not None:  # a shared prefix comes on top of input_len (domain.workload.datasets)
        prompt += _number(workload.get("shared_prefix_len")) or 0
    d.put("prompt_tokens_mean", prompt, "plan workload input_len + shared_prefix_len", no_workload)
    d.put(
        "burstiness", _number(workload.get("burstiness")), "plan workload burstiness", no_workload
    )
    d.put(
        "multi_turn_share",
        0.0 if workload else None,
        "plan workload: independent single-turn requests",
        no_workload,
    )
    if not workload:
        d.miss("prefix_hit_rate", no_workload)
    elif not workload.get("shared_prefix_len"):
        d.put("prefix_hit_rate", 0.0, "plan workload: random prompts share no prefix")
    else:
        d.miss("prefix_hit_rate", "the planner's rows do not count prefix-cache hits")
    _plan_transfer(d, result, row, label, disaggregated, prompt)
    d.miss(
        "spike_prefill_overlap", "the planner's rows do not record which steps carried prefill work"
    )
    d.miss("frontend_cpu_share", "the planner does not model the serving frontend")
    return d


def _plan_transfer(
    d: Derived,
    result: Mapping[str, Any],
    row: Mapping[str, Any],
    label: str,
    disaggregated: bool,
    prompt: float | None,
) -> None:
    if not disaggregated:
        for name in ("kv_transfer_gbps", "transfer_share_of_ttft"):
            d.miss(
                name,
                "colocated: no KV transfer"
                if d.values.get("topology")
                else "the layout is unknown",
            )
        return
    link = _number(_mapping(result.get("links_gbps")).get(label))
    d.put("kv_transfer_gbps", link, "plan: modelled P-D link", "the result names no link")
    per_token, ttft = _number(result.get("kv_bytes_per_token")), _number(row.get("p50_ttft_ms"))
    share = (
        prompt * per_token / (link * 1e9) * 1000 / ttft
        if link and per_token and prompt and ttft
        else None
    )
    d.put(
        "transfer_share_of_ttft",
        share,
        "plan: mean prompt's KV over the link / median TTFT",
        "the result lacks the link, KV bytes per token or the prompt length",
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    """A document's sub-object, or an empty one when it is something else."""
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    """A JSON number as float; the bench's "inf" as infinity; anything else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if value in ("inf", "Infinity"):
        return math.inf
    return None
