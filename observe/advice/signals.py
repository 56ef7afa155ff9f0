"""The advisor's signals (named in observe/advice/advisor.py) from what pdctl measured: a
deployment's
live frame and recent history here; a `pdctl bench` result or one row of a `pdctl plan` result
in observe/advice/result_signals.py (re-exported here, so callers need only this module).

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
  output_tokens_mean       frame["engines"]: vllm:generation_tokens per vllm:request_success on
                           the decode and colocated instances (read by the planner's forecast)
  frontend_cpu_share       frame["engines"]: the busiest engine instance's
                           process_cpu_seconds_total rate (vLLM's API server process: HTTP,
                           tokenizing, detokenizing; the stand-in models it:
                           simulator/model/frontend_clock.py); with a render tier, the busiest of
                           the render instances' and the engines' (they still stream)
  kv_transfer_gbps         the engine's own times (NIXL, newer MoRIIO): KV bytes per request
                           over the median transfer time
  transfer_share_of_ttft   the same: median transfer time over median TTFT
  spike_prefill_overlap    frame["interference"]: the proxy's ITL spikes that ended as another
                           request's prefill finished on the same instance, over all spikes
  multi_turn_share         frame["multi_turn_share"]: the proxy's chat requests that carry an
                           earlier assistant answer, of all its chat requests
  prompt_saved_share       frame["prompt_saved_share"] (observe/sections/saved_share.py): prompt
  tokens
                           a prefill pulled back from a decode, of all its prompt tokens
  burstiness               frame["arrivals"]: gamma shape of the gaps between client requests
                           arriving at the proxy (mean^2 / variance); absent below
                           MIN_ARRIVAL_GAPS gaps in the window
  pd_recomputing_decodes,  frame["pd"] (observe/sections/pd_check.py, 10 s whatever the window): the
  pd_transfer_share,       decodes recomputing, the lowest judged share of prompt tokens by
  pd_failed_transfers      KV transfer, failed transfers; absent where the check does not
                           apply (colocated)
  canary_failing_pairs     frame["canary"] (observe/canary/state.py): pairs whose last canary answer
                           differed from the model's colocated answer; absent when the canary
                           is off, does not apply or has not judged yet
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from domain.kv_connectors import by_metric_prefix
from observe.advice.advisor import advise
from observe.advice.derived import Derived
from observe.advice.result_signals import from_bench, from_plan
from observe.build import MIN_ARRIVAL_GAPS

__all__ = ["Derived", "advice", "from_bench", "from_frame", "from_plan"]

_NO_FRAME = "no live frame: the deployment is not running here, or not scraped yet"


def advice(derived: Derived) -> dict[str, Any]:
    """The advisor's verdicts with, for each signal a rule reads, its source or its absence."""
    verdicts = []
    for verdict in advise(derived.values, derived.not_enough):
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
        "evidence": derived.evidence,
        "not_enough_evidence": derived.not_enough,
        "verdicts": verdicts,
    }


# -- live ------------------------------------------------------------------------------------


def from_frame(
    frame: Mapping[str, Any] | None,
    points: Sequence[Mapping[str, Any]] = (),
    topology: str | None = None,
    slo: Mapping[str, Any] | None = None,
    kv_bytes_per_token: int | None = None,
    time_scale: float = 1.0,
) -> Derived:
    """Signals of one deployment from its live frame (None: not running or not scraped).
    `time_scale`: a stand-in's --time-scale K; its rates are read in its modelled time (x K,
    as the rules' thresholds mean them), its latencies as measured (its SLOs are set alike)."""
    d = Derived()
    # A window with a change in it, or too few real requests, decides nothing (frames from
    # before the scraper marked them carry no `evidence`: judged as they are)
    d.evidence = (frame or {}).get("evidence")
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
            "output_tokens_mean",
            "kv_transfer_gbps",
            "transfer_share_of_ttft",
        ):
            d.miss(name, _NO_FRAME)
    else:
        _latencies(d, frame, time_scale)
        _load(d, frame, points)
        _engine_work(d, frame)
        _transfer(d, frame, topology, kv_bytes_per_token, time_scale)
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
        d.miss("prompt_saved_share", _NO_FRAME)
    else:
        d.put(
            "prompt_saved_share",
            frame.get("prompt_saved_share"),
            "prefills: prompt tokens pulled back from a decode (bidirectional KV) over all "
            f"prompt tokens, {frame.get('window', '')} window",
            "no prefill reports pulled-back prompt tokens",
        )
    if frame is None:
        d.miss("burstiness", _NO_FRAME)
    else:
        _arrivals(d, frame)
    if frame is None:
        for name in ("frontend_cpu_share", "prefix_hit_rate", *PD_SIGNALS, "canary_failing_pairs"):
            d.miss(name, _NO_FRAME)
    else:
        _pd(d, frame.get("pd") or {})
        _canary(d, frame.get("canary") or {})
    return d


def _canary(d: Derived, canary: Mapping[str, Any]) -> None:
    if not canary.get("applies") or canary.get("last") is None:
        why = canary.get("why") or "no canary judged yet"
        d.miss("canary_failing_pairs", f"the correctness canary: {why}")
        return
    src = "the correctness canary: the last answer per pair (observe/canary/state.py)"
    d.put("canary_failing_pairs", len(canary.get("failing") or ()), src)


PD_SIGNALS = ("pd_recomputing_decodes", "pd_transfer_share", "pd_failed_transfers")


def _pd(d: Derived, pd: Mapping[str, Any]) -> None:
    if not pd.get("applies"):
        for name in PD_SIGNALS:
            d.miss(name, f"the PD check does not apply: {pd.get('why') or 'not checked'}")
        return
    rows = pd.get("decodes") or []
    src = "decodes: vllm:prompt_tokens_by_source, last 10 s (observe/sections/pd_check.py)"
    d.put("pd_recomputing_decodes", len(pd.get("recomputing") or ()), src)
    judged = [
        r["share"] for r in rows if r["status"] in ("ok", "recomputing") and r["share"] is not None
    ]
    d.put(
        "pd_transfer_share",
        min(judged) if judged else None,
        src,
        "too little traffic on the decodes to judge",
    )
    failed = [r["failed_transfers"] for r in rows if r.get("failed_transfers") is not None]
    d.put(
        "pd_failed_transfers",
        sum(failed) if failed else None,
        "decodes: vllm:nixl_/moriio_num_failed_transfers, last 10 s",
        "no decode answered its scrape",
    )


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
        "output_tokens_mean",
        work.get("output_tokens_per_request"),
        f"vllm:generation_tokens / vllm:request_success on the decode and colocated "
        f"instances, {window} window",
        f"no request finished on a decoding engine in the {window} window",
    )
    d.put(
        "prompt_tokens_mean",
        work.get("prompt_tokens_per_request"),
        f"vllm:prompt_tokens / vllm:request_success on the prefill and colocated instances, "
        f"{window} window",
        f"no request finished on a prefilling engine in the {window} window",
    )
    if work.get("render_instances"):
        _frontend_with_render_tier(d, work, window)
        return
    d.put(
        "frontend_cpu_share",
        work.get("cpu_cores_max"),
        f"process_cpu_seconds_total rate of the busiest instance's API server process, "
        f"{window} window",
        "no instance exports process_cpu_seconds_total",
    )


def _frontend_with_render_tier(d: Derived, work: Mapping[str, Any], window: str) -> None:
    """A render tier's processes are all frontend (rendering, derendering, HTTP); the engines'
    API servers still parse token ids, detokenize and stream, so the busiest of both is the
    frontend's bottleneck (a tier that took the prompts off them can leave the streaming
    hot)."""
    render, engines = work.get("render_cpu_cores_max"), work.get("cpu_cores_max")
    if render is None:
        d.miss(
            "frontend_cpu_share",
            "the render tier exports no process_cpu_seconds_total (not scraped yet)",
        )
        return
    source = (
        f"process_cpu_seconds_total rate of the busiest render tier instance (the whole "
        f"process is the frontend: rendering, derendering, HTTP), {window} window"
    )
    if engines is None:
        d.put("frontend_cpu_share", render, source)
        return
    busiest = "render tier" if render >= engines else "engine API server"
    d.put(
        "frontend_cpu_share",
        max(render, engines),
        f"{source}, or of the busiest engine's API server process (token ids in, text "
        f"streamed out) when higher: here the {busiest}",
    )


def _ms(histogram: Mapping[str, Any] | None, q: str) -> float | None:
    if not histogram or not histogram.get("count"):
        return None
    value = histogram.get(q)
    return None if value is None else value * 1000


def _latencies(d: Derived, frame: Mapping[str, Any], time_scale: float = 1.0) -> None:
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
    rate = frame.get("request_rate")
    d.put(
        "request_rate",
        rate * time_scale if rate is not None else None,
        f"req/s that reached the proxy (rejected ones too), {window} window"
        + (f", x {time_scale:g} (the stand-in's time scale)" if time_scale != 1 else ""),
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
    d: Derived,
    frame: Mapping[str, Any],
    topology: str | None,
    kv_bytes_per_token: int | None,
    time_scale: float = 1.0,
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
    backend = by_metric_prefix(kv.get("source") or "")
    connector = backend.label if backend is not None else ""
    no_times = (
        "the connector reports no transfer times (NIXL and newer MoRIIO do; older MoRIIO, "
        "a derived figure, does not)"
    )
    d.put(
        "kv_transfer_gbps",
        per_request / (xfer_ms / 1000) / 1e9 * time_scale if xfer_ms else None,
        f"KV bytes per request / median {connector} transfer time (the engine's own)",
        no_times,
    )
    d.put(
        "transfer_share_of_ttft",
        xfer_ms / ttft_ms if xfer_ms and ttft_ms else None,
        f"median {connector} transfer time (the engine's own) / median TTFT",
        no_times,
    )
