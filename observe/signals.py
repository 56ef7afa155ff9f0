"""The advisor's signals (named in observe/advisor.py) from what pdctl measured: a deployment's
live frame and recent history, a `pdctl bench` result, or one row of a `pdctl plan` result.

Every derivation records where each signal came from, and why each missing one is missing: a
signal that the data cannot give stays absent, so the advisor says "no signal" rather than
guess. Pure: dicts in, a `Derived` out.

Live: `frame` is observe/frames.py's frame for one window, `points` the history points of
that window (observe/build.py `point`).
  topology                 the deployment spec
  slo_ttft_ms, slo_itl_ms  frame["slo"] (the spec's targets)
  ttft_p99_ms              frame["ttft"]: the proxy's client-side histogram over the window
  itl_p50_ms, itl_p99_ms   frame["itl"]: every streamed gap pooled (not per request)
  request_rate             frame["request_rate"]: finished requests per second at the proxy
  slo_attainment           frame["slo_attainment"]
  concurrency_mean         mean "running" over the window's history points, summed over the
                           engine instances (a request prefilling on P counts there too)
  prompt_tokens_mean       frame["engines"]: vllm:prompt_tokens per vllm:request_success on the
                           prefill and colocated instances; else (disaggregated) KV bytes/s
                           over KV bytes per token over request rate
  prefix_hit_rate          frame["engines"]: vllm:prefix_cache_hits / queries, same instances
  frontend_cpu_share       frame["engines"]: the busiest instance's process_cpu_seconds_total
                           rate (vLLM's API server process: HTTP, tokenizing, detokenizing);
                           absent on the stand-in, whose one process also runs the engine
  kv_transfer_gbps         NIXL only: KV bytes per request over the median transfer time
  transfer_share_of_ttft   NIXL only: median transfer time over median TTFT
  spike_prefill_overlap    frame["interference"]: the proxy's ITL spikes that ended as another
                           request's prefill finished on the same instance, over all spikes
  multi_turn_share         frame["multi_turn_share"]: the proxy's chat requests that carry an
                           earlier assistant answer, of all its chat requests
  burstiness               frame["arrivals"]: gamma shape of the gaps between client requests
                           arriving at the proxy (mean^2 / variance); absent below
                           MIN_ARRIVAL_GAPS gaps in the window

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from observe.advisor import advise
from observe.build import MIN_ARRIVAL_GAPS

_DISAGG_LABEL = re.compile(r"^\d+P-TP\d+\+\d+D-TP\d+")  # planner.PlanConfig.label
_COLOCATED_LABEL = re.compile(r"^\d+xTP\d+$")
_NO_FRAME = "no live frame: the deployment is not running here, or not scraped yet"


@dataclass
class Derived:
    """Signals by name, where each came from, and why each absent one is absent."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    absent: dict[str, str] = field(default_factory=dict)

    def put(self, name: str, value: Any, source: str, why_not: str = "") -> None:
        """Record `value` (a finite number or a word) or, when it is None, why not."""
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            self.absent[name] = why_not or f"{source}: not in the data"
            return
        self.values[name] = float(f"{value:.6g}") if isinstance(value, float) else value
        self.sources[name] = source

    def miss(self, name: str, why: str) -> None:
        self.absent[name] = why


def advice(derived: Derived) -> dict[str, Any]:
    """The advisor's verdicts with, for each signal a rule reads, its source or its absence."""
    verdicts = []
    for verdict in advise(derived.values):
        item = verdict.to_json()
        item["sources"] = {
            name: derived.sources.get(name) or f"absent: {derived.absent.get(name, 'not measured')}"
            for name in verdict.signals
        }
        verdicts.append(item)
    return {
        "signals": derived.values,
        "sources": derived.sources,
        "absent": derived.absent,
        "verdicts": verdicts,
    }


# -- live ------------------------------------------------------------------------------------


def from_frame(
    frame: Mapping[str, Any] | None,
    points: Sequence[Mapping[str, Any]] = (),
    topology: str | None = None,
    slo: Mapping[str, Any] | None = None,
    kv_bytes_per_token: int | None = None,
) -> Derived:
    """Signals of one deployment from its live frame (None: not running or not scraped)."""
    d = Derived()
    d.put("topology", topology, "deployment spec")
    slo = (frame or {}).get("slo") or slo or {}
    d.put("slo_ttft_ms", slo.get("ttft_ms"), "deployment spec SLO", "no TTFT target set")
    d.put("slo_itl_ms", slo.get("itl_ms"), "deployment spec SLO", "no ITL target set")
    if frame is None:
        for name in (
            "ttft_p99_ms",
            "itl_p99_ms",
            "itl_p50_ms",
            "request_rate",
            "slo_attainment",
            "concurrency_mean",
            "prompt_tokens_mean",
            "kv_transfer_gbps",
            "transfer_share_of_ttft",
        ):
            d.miss(name, _NO_FRAME)
    else:
        _latencies(d, frame)
        _load(d, frame, points)
        _engine_work(d, frame)
        _transfer(d, frame, topology, kv_bytes_per_token)
    if frame is None:
        d.miss("spike_prefill_overlap", _NO_FRAME)
    if frame is None:
        d.miss("multi_turn_share", _NO_FRAME)
    else:
        window = frame.get("window", "")
        d.put(
            "multi_turn_share",
            frame.get("multi_turn_share"),
            f"proxy: chat requests carrying an earlier assistant answer, of all chat "
            f"requests, {window} window",
            f"no chat request in the {window} window (a completion's prompt cannot say)",
        )
    if frame is None:
        d.miss("burstiness", _NO_FRAME)
    else:
        _arrivals(d, frame)
    if frame is None:
        for name in ("frontend_cpu_share", "prefix_hit_rate"):
            d.miss(name, _NO_FRAME)
    return d


def _arrivals(d: Derived, frame: Mapping[str, Any]) -> None:
    window, arrived = frame.get("window", ""), frame.get("arrivals") or {}
    gaps = arrived.get("gaps")
    why = (
        "the proxy reports no arrival gaps"
        if gaps is None
        else f"fewer than {MIN_ARRIVAL_GAPS} arrivals at the proxy in the {window} window "
        f"({gaps} gaps)"
        if gaps < MIN_ARRIVAL_GAPS
        else f"the {window} window's arrivals are evenly spaced: no spread to measure"
    )
    d.put(
        "burstiness",
        arrived.get("burstiness"),
        f"proxy: gamma shape of arrival gaps (mean^2/variance), {window} window",
        why,
    )


def _engine_work(d: Derived, frame: Mapping[str, Any]) -> None:
    window, work = frame.get("window", ""), frame.get("engines") or {}
    spikes = frame.get("interference") or {}
    d.put(
        "spike_prefill_overlap",
        spikes.get("at_prefill_share"),
        f"proxy: share of ITL spikes (> 2x the request's median gap) that ended as another "
        f"request's prefill finished on the same instance, {window} window",
        f"the proxy reports no ITL spike counts in the {window} window",
    )
    d.put(
        "prefix_hit_rate",
        work.get("prefix_hit_rate"),
        f"vllm:prefix_cache_hits / vllm:prefix_cache_queries on the prefill and colocated "
        f"instances, {window} window",
        f"no prefix-cache queries in the {window} window (prefix caching off, or idle)",
    )
    d.put(
        "prompt_tokens_mean",
        work.get("prompt_tokens_per_request"),
        f"vllm:prompt_tokens / vllm:request_success on the prefill and colocated instances, "
        f"{window} window",
        f"no request finished on a prefilling engine in the {window} window",
    )
    if frame.get("simulated"):
        d.miss(
            "frontend_cpu_share",
            "the stand-in's one process also runs its simulated "
            "engine, so its CPU is not the frontend's",
        )
        return
    d.put(
        "frontend_cpu_share",
        work.get("cpu_cores_max"),
        f"process_cpu_seconds_total rate of the busiest instance's API server process, "
        f"{window} window",
        "no instance exports process_cpu_seconds_total",
    )


def _ms(histogram: Mapping[str, Any] | None, q: str) -> float | None:
    if not histogram or not histogram.get("count"):
        return None
    value = histogram.get(q)
    return None if value is None else value * 1000


def _latencies(d: Derived, frame: Mapping[str, Any]) -> None:
    window = frame.get("window", "")
    idle = f"no requests finished in the {window} window"
    d.put(
        "ttft_p99_ms",
        _ms(frame.get("ttft"), "p99"),
        f"proxy TTFT histogram p99, {window} window",
        idle,
    )
    d.put(
        "itl_p99_ms",
        _ms(frame.get("itl"), "p99"),
        f"proxy ITL histogram p99 (all gaps pooled), {window} window",
        idle,
    )
    d.put(
        "itl_p50_ms",
        _ms(frame.get("itl"), "p50"),
        f"proxy ITL histogram p50, {window} window",
        idle,
    )
    d.put(
        "request_rate",
        frame.get("request_rate"),
        f"finished req/s at the proxy, {window} window",
        "the proxy reports no requests",
    )
    d.put(
        "slo_attainment", frame.get("slo_attainment"), f"proxy SLO counters, {window} window", idle
    )


def _load(d: Derived, frame: Mapping[str, Any], points: Sequence[Mapping[str, Any]]) -> None:
    running = [p["running"] for p in points if p.get("running") is not None]
    if running:
        d.put(
            "concurrency_mean",
            sum(running) / len(running),
            f"mean running requests over {len(running)} history points",
        )
    else:
        d.put("concurrency_mean", frame.get("running"), "running requests now (no history yet)")


def _transfer(
    d: Derived, frame: Mapping[str, Any], topology: str | None, kv_bytes_per_token: int | None
) -> None:
    kv = frame.get("kv") or {}
    rate, bytes_per_s = frame.get("request_rate"), kv.get("bytes_per_s")
    if topology != "disaggregated":
        for name in ("kv_transfer_gbps", "transfer_share_of_ttft"):
            d.miss(name, "colocated: no KV transfer")
        return
    if not (rate and bytes_per_s and kv_bytes_per_token):
        why = (
            "no model profile for KV bytes per token"
            if not kv_bytes_per_token
            else "no KV moved or no request finished in the window"
        )
        for name in ("prompt_tokens_mean", "kv_transfer_gbps", "transfer_share_of_ttft"):
            if name not in d.values:
                d.miss(name, why)
        return
    per_request = bytes_per_s / rate
    if "prompt_tokens_mean" not in d.values:  # the engines' own count is more direct
        d.put(
            "prompt_tokens_mean",
            per_request / kv_bytes_per_token,
            f"KV bytes/s ({kv.get('source')}) / KV bytes per token / request rate",
        )
    xfer_ms, ttft_ms = kv.get("xfer_p50_ms"), _ms(frame.get("ttft"), "p50")
    no_times = "the connector reports no transfer times (NIXL does; MoRIIO does not)"
    d.put(
        "kv_transfer_gbps",
        per_request / (xfer_ms / 1000) / 1e9 if xfer_ms else None,
        "KV bytes per request / median NIXL transfer time",
        no_times,
    )
    d.put(
        "transfer_share_of_ttft",
        xfer_ms / ttft_ms if xfer_ms and ttft_ms else None,
        "median NIXL transfer time / median TTFT",
        no_times,
    )


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
    if prompt is not None:  # a shared prefix comes on top of input_len (domain.datasets)
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
