"""`pdctl calibrate`'s work, without I/O: a saved `pdctl bench` result in, a calibrated
profile and its error report out.

The step coefficients come from the bench's per-request timings (simulator/model/calibration);
the TTFT offset from replaying the fitted runs on the planner with those coefficients (the
bench's `--arrivals vllm` schedule is the planner's, so the same requests arrive at the same
times); the error from replaying the measurements held out of the fit: a whole rate
(`hold_out_rate`) or every HOLD_OUT_EVERY-th request of each run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from domain.measures.slo import percentile
from simulator.model.calibration.fit import FitError, fit_handoff, fit_steps
from simulator.model.calibration.observations import step_observations, timelines
from simulator.model.calibration.profile import CalibratedProfile
from simulator.model.calibration.served import Served, prefill_observations
from simulator.plan.calibration.bench_runs import CalibrationError, Run, read_runs
from simulator.plan.calibration.judging import (
    HOLD_OUT_EVERY,
    Calibration,
    ape,
    judged,
    mean_gap,
    mean_or_none,
)
from simulator.plan.cluster import RequestResult
from simulator.plan.planner import PlanError, PlanSetup, parse_config, run_with_results

__all__ = ["Calibration", "CalibrationError", "calibrate"]


def calibrate(
    document: Any,
    model: str,
    hardware: str,
    config: str = "1xtp1",
    hold_out_rate: float | None = None,
    source: str = "",
) -> Calibration:
    """Fit, then judge the fit on what it did not see. `hardware` is the cluster as named to
    the planner; `config` the layout benched (its TP is the one calibrated)."""
    runs = read_runs(document, model)
    try:
        layout = parse_config(config)
    except PlanError as exc:
        raise CalibrationError("config", str(exc)) from None
    tps = {layout.tp} if layout.kind == "colocated" else {layout.prefill_tp, layout.decode_tp}
    if len(tps) != 1:
        raise CalibrationError(
            "config", f"{config}: prefill and decode TP differ; a profile is one TP"
        )
    disaggregated = layout.kind == "disaggregated"
    if hold_out_rate is not None and hold_out_rate not in {r.rate for r in runs}:
        rates = ", ".join(f"{r.rate:g}" for r in runs)
        raise CalibrationError(
            "hold_out_rate", f"{hold_out_rate:g} is not a rate of the bench ({rates})"
        )
    fitted = [r for r in runs if r.rate != hold_out_rate]
    if not fitted:
        raise CalibrationError("hold_out_rate", "holding it out leaves no rate to fit")
    observations = []
    for run in fitted:
        every = timelines(run.requests)
        fits = [not _held(r, run, hold_out_rate) for r in _ok(run.requests)]
        owners = [t for t, fit in zip(every, fits, strict=True) if fit]
        # a decode computes no prompt: its steps carry none, the prefill legs are the prefills
        observations += step_observations(every, owners, cached=run.cached or disaggregated)
        if disaggregated:
            legs = _legs(run.requests)
            held = {i for i, r in enumerate(_ok(run.requests)) if _held(r, run, hold_out_rate)}
            owners_legs = [leg for leg in legs if leg.index not in held]
            observations += prefill_observations(legs, owners_legs)
    try:
        steps = fit_steps(observations)
    except FitError as exc:
        raise CalibrationError("requests", str(exc)) from None
    profile = CalibratedProfile(
        model=model,
        hardware=hardware,
        tp=tps.pop(),
        steps=steps,
        handoff=fit_handoff(_transfers(fitted), PlanSetup(model, hardware).link_latency_s),
        source=source,
        fitted_rates=tuple(r.rate for r in fitted),
        steps_fitted=len(observations),
    )
    offset, offset_from = ttft_offset(profile, fitted, config, hold_out_rate)
    profile = replace(profile, ttft_offset_s=offset)
    report = error_report(profile, runs, config, hold_out_rate)
    report["ttft_offset"] = offset_from
    return judged(
        profile,
        report,
        "the measurements disagree with each other (a busy machine, a cold server's first "
        "requests?); bench again",
    )


def ttft_offset(
    profile: CalibratedProfile, fitted: Sequence[Run], config: str, hold_out_rate: float | None
) -> tuple[float, dict[str, Any]]:
    """What the client's TTFT carries beyond the calibrated replay's, averaged over the fitted
    runs whose prompts were not cached: client p50 minus replay p50. Where `pdctl bench` kept
    the engine's own histograms (engine_phases), the offset is split in two: outside the
    engine (client mean minus the engine's mean TTFT: HTTP, tokenizing, streaming) and the
    rest, what the replay misses of the engine's own TTFT. The replay's offset forecast the
    held-out rate better in the closed loop (it carries both parts), so it is the one used."""
    runs = [run for run in fitted if not run.cached]
    if not runs:
        return 0.0, {"from": "none: every fitted run's prompts were cached"}
    gaps = [
        _p50_ttft(_measured(run, hold_out_rate, fitted=True))
        - _p50_ttft(_replayed(profile, run, config, hold_out_rate, fitted=True))
        for run in runs
    ]
    offset = sum(gaps) / len(gaps)
    said: dict[str, Any] = {"from": "client p50 - calibrated replay p50", "ms": offset * 1e3}
    if all("engine_ttft_s" in run.engine_phases for run in runs):
        outside = [
            _mean_ttft(_measured(run, hold_out_rate, fitted=True))
            - run.engine_phases["engine_ttft_s"]
            for run in runs
        ]
        said["outside_engine_ms"] = sum(outside) / len(outside) * 1e3
        said["engine_ms"] = said["ms"] - said["outside_engine_ms"]
        phases = ("queue_s", "prefill_s", "engine_ttft_s")
        said["engine_phases_ms"] = {
            p: round(sum(r.engine_phases.get(p, 0.0) for r in runs) / len(runs) * 1e3, 3)
            for p in phases
        }
    return offset, {k: round(v, 3) if isinstance(v, float) else v for k, v in said.items()}


def error_report(
    profile: CalibratedProfile, runs: Sequence[Run], config: str, hold_out_rate: float | None
) -> dict[str, Any]:
    """MAPE of TTFT and of each request's mean ITL, and the error of the p50s, on the held-out
    measurements: calibrated, and as the datasheet alone forecast them."""
    held = [r for r in runs if hold_out_rate is None or r.rate == hold_out_rate]
    out: dict[str, Any] = {
        "held_out": (
            f"the run at {hold_out_rate:g} req/s"
            if hold_out_rate is not None
            else f"every {HOLD_OUT_EVERY}th request of each run"
        ),
        "model": profile.model,
        "hardware": profile.hardware,
    }
    for label, cal in (("calibrated", profile), ("datasheet", None)):
        rows = [_judge(cal, profile, run, config, hold_out_rate) for run in held if not run.cached]
        out[label] = {
            "rates": rows,
            "ttft_mape": mean_or_none([r["ttft_mape"] for r in rows]),
            "itl_mape": mean_or_none([r["itl_mape"] for r in rows]),
        }
    return out


def _judge(
    cal: CalibratedProfile | None,
    profile: CalibratedProfile,
    run: Run,
    config: str,
    hold_out_rate: float | None,
) -> dict[str, Any]:
    measured = _measured(run, hold_out_rate, fitted=False)
    setup = PlanSetup(profile.model, profile.hardware, gpus=64, calibration=cal)
    _, results = run_with_results(setup, parse_config(config), run.workload, run.rate)
    by_id = {r.request_id: r for r in results}
    pairs = [(m, by_id[f"r{m['index']}"]) for m in measured if f"r{m['index']}" in by_id]
    ttft_errors = [ape(f.ttft, m["ttft"]) for m, f in pairs if f.ttft is not None]
    itl_errors = [ape(mean_gap(f), sum(m["itl"]) / len(m["itl"])) for m, f in pairs if m["itl"]]
    forecast = [f for _, f in pairs]
    p50 = {
        "ttft_p50_ms": (_p50_ttft(measured) * 1000, _p50_ttft(forecast) * 1000),
        "itl_p50_ms": (_p50_itl(measured) * 1000, _p50_itl(forecast) * 1000),
    }
    row: dict[str, Any] = {"rate": run.rate, "requests": len(pairs)}
    for key, (live, model) in p50.items():
        row[key] = {
            "measured": round(live, 3),
            "forecast": round(model, 3),
            "error": round((model - live) / live, 4) if live else None,
        }
    row["ttft_mape"] = mean_or_none(ttft_errors)
    row["itl_mape"] = mean_or_none(itl_errors)
    return row


def _replayed(
    profile: CalibratedProfile, run: Run, config: str, hold_out_rate: float | None, fitted: bool
) -> list[RequestResult]:
    setup = PlanSetup(profile.model, profile.hardware, gpus=64, calibration=profile)
    _, results = run_with_results(setup, parse_config(config), run.workload, run.rate)
    keep = {f"r{r['index']}" for r in _measured(run, hold_out_rate, fitted)}
    return [r for r in results if r.request_id in keep]


def _measured(run: Run, hold_out_rate: float | None, fitted: bool) -> list[dict[str, Any]]:
    return [r for r in _ok(run.requests) if _held(r, run, hold_out_rate) != fitted]


def _ok(requests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(r) for r in requests if r.get("ok") and r.get("output_tokens", 0) >= 1]


def _held(record: Mapping[str, Any], run: Run, hold_out_rate: float | None) -> bool:
    """Held out of the fit: the held-out rate's every request, else every HOLD_OUT_EVERY-th."""
    if hold_out_rate is not None:
        return run.rate == hold_out_rate
    return record.get("index", 0) % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1


def _transfers(runs: Sequence[Run]) -> list[tuple[int, float]]:
    """(prompt tokens, transfer seconds) of each request a pdctl proxy gave TTFT parts."""
    return [
        (leg.prompt_tokens, leg.transfer_s)
        for run in runs
        for leg in _legs(run.requests)
        if leg.transfer_s is not None
    ]


def _legs(requests: Sequence[Mapping[str, Any]]) -> list[Served]:
    """The successful records as served requests, each prefill leg from its TTFT parts (one
    prefill engine assumed: the bench does not say which served it, so a leg counts only if
    no other overlapped it)."""
    out = []
    for i, r in enumerate(_ok(requests)):
        parts = r.get("ttft_parts")
        parts = parts if isinstance(parts, dict) else {}
        prefill, transfer = parts.get("prefill_ms"), parts.get("transfer_ms")
        out.append(
            Served(
                i,
                r["start"],
                r["ttft"],
                r["ttft"] + sum(r["itl"]),
                int(r["prompt_tokens"]),
                int(r["output_tokens"]),
                prefill / 1000 if isinstance(prefill, int | float) and prefill >= 0 else None,
                None,
                transfer / 1000 if isinstance(transfer, int | float) and transfer >= 0 else None,
            )
        )
    return out


def _p50_ttft(items: Sequence[Any]) -> float:
    values = [i["ttft"] if isinstance(i, dict) else i.ttft for i in items]
    return percentile([v for v in values if v is not None], 50) or 0.0


def _p50_itl(items: Sequence[Any]) -> float:
    gaps: list[float] = []
    for i in items:
        if isinstance(i, dict):
            gaps += i["itl"]
        else:
            gaps += [g for g, c in i.itl_gaps for _ in range(c)]
    return percentile(gaps, 50) or 0.0


def _mean_ttft(records: Sequence[dict[str, Any]]) -> float:
    return sum(r["ttft"] for r in records) / len(records) if records else 0.0
