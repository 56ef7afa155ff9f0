"""`pdctl calibrate --deployment`'s work, without I/O: a running deployment's own traffic
(its proxy's request log) in, a calibrated profile and its error report out.

The steps are fitted to each logged request's mean inter-token gap and, on a disaggregated
layout, its prefill leg (simulator/model/calibration/served.py). The error comes from
replaying the logged requests themselves (their arrival times, prompt and answer lengths) on
the deployment's layout: every HOLD_OUT_EVERY-th request is not fitted and is judged, with the
calibrated timing and with the datasheet's.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from domain.measures.slo import percentile
from simulator.model.calibration.fit import FitError, fit_handoff, fit_steps
from simulator.model.calibration.profile import CalibratedProfile
from simulator.model.calibration.served import (
    Served,
    decode_observations,
    prefill_observations,
    served,
)
from simulator.plan.calibration.bench_runs import CalibrationError
from simulator.plan.calibration.judging import (
    HOLD_OUT_EVERY,
    Calibration,
    ape,
    judged,
    mean_gap,
    mean_or_none,
)
from simulator.plan.cluster import Arrival, RequestResult
from simulator.plan.planner import PlanConfig, PlanError, PlanSetup, replay

MIN_REQUESTS = 50  # logged requests that streamed at least two tokens: fewer pin nothing


def calibrate_served(
    lines: Sequence[Mapping[str, Any]],
    model: str,
    hardware: str,
    config: PlanConfig,
    source: str = "",
    time_scale: float = 1.0,
) -> Calibration:
    """Fit on the log's requests but every HOLD_OUT_EVERY-th, judge on those. `time_scale`: a
    stand-in's (its wall clock runs that many times the model's), for the datasheet's row."""
    tps = {config.tp} if config.kind == "colocated" else {config.prefill_tp, config.decode_tp}
    if len(tps) != 1:
        raise CalibrationError(
            "config", f"{config.label}: prefill and decode TP differ; a profile is one TP"
        )
    run, skipped = served(lines)
    streamed = [r for r in run if r.output_tokens >= 2]
    if len(streamed) < MIN_REQUESTS:
        raise CalibrationError(
            "requests",
            f"the proxy's log holds {len(streamed)} requests that streamed two tokens or more "
            f"with a usage-counted prompt ({skipped} without one), need {MIN_REQUESTS}: send "
            "more traffic (streams with stream_options.include_usage) and calibrate again",
        )
    disaggregated = config.kind == "disaggregated"
    fitted = [r for r in run if not _held(r)]
    observations = decode_observations(run, fitted, disaggregated)
    if disaggregated:
        observations += prefill_observations(run, fitted)
    try:
        steps = fit_steps(observations)
    except FitError as exc:
        raise CalibrationError("requests", str(exc)) from None
    transfers = [(r.prompt_tokens, r.transfer_s) for r in fitted if r.transfer_s is not None]
    profile = CalibratedProfile(
        model=model,
        hardware=hardware,
        tp=tps.pop(),
        steps=steps,
        handoff=fit_handoff(transfers, PlanSetup(model, hardware).link_latency_s)
        if disaggregated
        else None,
        source=source,
        fitted_rates=(round(_rate(run), 3),),
        steps_fitted=len(observations),
    )
    arrivals = _arrivals(run)
    replayed = _replay(profile, config, arrivals, 1.0)
    gap = _p50([r.ttft for r in fitted]) - _p50([replayed[r.index].ttft for r in fitted])
    profile = replace(profile, ttft_offset_s=gap)
    report: dict[str, Any] = {
        "held_out": f"every {HOLD_OUT_EVERY}th request of the proxy's log",
        "model": model,
        "hardware": hardware,
        "requests": len(run),
        "without_usage": skipped,
        "ttft_offset": {"from": "log p50 - calibrated replay p50", "ms": round(gap * 1e3, 3)},
    }
    held = [r for r in run if _held(r)]
    for label, cal, scale in (("calibrated", profile, 1.0), ("datasheet", None, time_scale)):
        row = _judge(held, _replay(cal, config, arrivals, scale, profile), _rate(run))
        report[label] = {"rates": [row], "ttft_mape": row["ttft_mape"], "itl_mape": row["itl_mape"]}
    return judged(
        profile,
        report,
        "the traffic changed meanwhile, or the engines were shared; calibrate again on a "
        "steadier stretch",
    )


def _held(r: Served) -> bool:
    return r.index % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1


def _rate(run: Sequence[Served]) -> float:
    span = max(r.start for r in run) - min(r.start for r in run)
    return (len(run) - 1) / span if span > 0 else 0.0


def _arrivals(run: Sequence[Served]) -> list[Arrival]:
    """The logged requests as the planner's clients: same arrival times and lengths, prompts
    of distinct tokens (the log does not keep prompts; no two share a cached prefix)."""
    t0 = min(r.start for r in run)
    rng = random.Random(0)
    return [
        Arrival(
            f"r{r.index}",
            r.start - t0,
            [rng.randrange(1, 30_000) for _ in range(r.prompt_tokens)],
            r.output_tokens,
        )
        for r in run
    ]


def _replay(
    calibration: CalibratedProfile | None,
    config: PlanConfig,
    arrivals: list[Arrival],
    scale: float,
    named: CalibratedProfile | None = None,
) -> dict[int, RequestResult]:
    """Each request's replayed result by log index, on the wall clock (`scale` x model)."""
    who = calibration or named
    assert who is not None
    setup = PlanSetup(who.model, who.hardware, gpus=max(64, config.gpus), calibration=calibration)
    timed = [replace(a, at=a.at / scale) for a in arrivals]
    try:
        results = replay(setup, config, timed)
    except PlanError as exc:
        raise CalibrationError("config", str(exc)) from None
    out = {}
    for r in results:
        ttft = None if r.ttft is None else r.ttft * scale
        e2e = None if r.e2e is None else r.e2e * scale
        gaps = [(g * scale, c) for g, c in r.itl_gaps]
        out[int(r.request_id[1:])] = replace(r, ttft=ttft, e2e=e2e, itl_gaps=gaps)
    return out


def _judge(
    held: Sequence[Served], forecast: dict[int, RequestResult], rate: float
) -> dict[str, Any]:
    pairs = [(m, forecast[m.index]) for m in held if m.index in forecast]
    ttft_errors = [ape(f.ttft, m.ttft) for m, f in pairs if f.ttft is not None]
    itl_errors = [
        ape(mean_gap(f), (m.e2e - m.ttft) / (m.output_tokens - 1))
        for m, f in pairs
        if m.output_tokens >= 2
    ]
    row: dict[str, Any] = {"rate": round(rate, 3), "requests": len(pairs)}
    measured_itl = [
        (m.e2e - m.ttft) / (m.output_tokens - 1) for m, _ in pairs if m.output_tokens > 1
    ]
    p50 = {
        "ttft_p50_ms": (_p50([m.ttft for m, _ in pairs]), _p50([f.ttft for _, f in pairs])),
        "itl_p50_ms": (_p50(measured_itl), _p50([mean_gap(f) for _, f in pairs])),
    }
    for key, (live, model) in p50.items():
        row[key] = {
            "measured": round(live * 1e3, 3),
            "forecast": round(model * 1e3, 3),
            "error": round((model - live) / live, 4) if live else None,
        }
    row["ttft_mape"] = mean_or_none(ttft_errors)
    row["itl_mape"] = mean_or_none(itl_errors)
    return row


def _p50(values: Sequence[float | None]) -> float:
    return percentile([v for v in values if v is not None], 50) or 0.0
