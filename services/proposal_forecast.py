"""The planner's prediction of a proposed change on this deployment's own workload: the same
requests (mean prompt and answer lengths, rate and burstiness as measured live) through the
layout that runs now and the one proposed, on the virtual clock (simulator/plan/planner.py).

Where the planner cannot say (no hardware or model profile, a signal missing, a change it does
not model such as bidirectional KV), the forecast says why and gives the direction the change
is built to move its signal. A deployment's calibrated profile (`pdctl calibrate`) replaces
the datasheet timing when it is of this model and hardware and its TP is every engine's in
both layouts; the forecast's `timing` says which it used. Pure apart from the planner's CPU
work (call it in a thread).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controller import (
    Change,
    DeploymentSpec,
    Engine,
    Topology,
    front_instances,
    instance_roles,
    timed_spec,
)
from domain.engine.frontend_cost import RENDER_WORTH, VLLM_API_SERVER, busiest_after
from domain.measures.slo import SloTargets, parse_itl_stat
from domain.modes import Mode, Role
from simulator.model.calibration.profile import CalibratedProfile
from simulator.plan import planner

SATURATED = 0.98  # cores: an API server at its one core, its demand unseen beyond it
PROMPTS = 60  # requests per forecast run: enough for a p99, each run under a few seconds
BASELINE_TOLERANCE = 0.2  # the planner's "now" this far from the measured figure: say why
# The advisor signal each watch reads, and the planner row's field that predicts it.
ROW_FIELD = {
    "ttft_p99_ms": "p99_ttft_ms",
    "itl_p99_ms": "p99_itl_ms",
    "slo_attainment": "slo_attainment",
}
NOT_MODELLED = {
    "frontend_cpu_share": "the planner does not model the serving frontend: a render tier "
    "takes the prompt side (parsing, chat template, tokenizing) off the engines' API servers, "
    "shared by its render instances; detokenizing and streaming stay on the engines",
    "prompt_saved_share": "the planner does not model multi-turn KV reuse: bidirectional KV "
    "transfer turns it from none to the share of each later turn's prompt that its decode "
    "still holds (make bench-bidir measures it)",
}


def forecast(
    spec: DeploymentSpec,
    change: Change,
    signals: dict[str, Any],
    calibration: CalibratedProfile | None = None,
) -> dict[str, Any]:
    """{"source": "planner", "timing": ..., "now": row, "after": row, "predicted": {...}} or,
    where it cannot run, {"source": None, "why": ..., "predicted": {direction only}}."""
    watch = change.watch
    direction_only = {"signal": watch, "direction": change.direction, "now_measured": None}
    direction_only["now_measured"] = signals.get(watch)
    if watch in NOT_MODELLED:
        why = NOT_MODELLED[watch]
        if watch == "frontend_cpu_share":
            fronts = front_instances(change.spec)
            renders = sum(g.count for g in change.spec.groups if g.role is Role.RENDER)
            why += frontend_estimate(signals, fronts, renders)
        return {"source": None, "why": why, "predicted": direction_only}
    setup, why = _setup(spec, change.spec)
    workload, rate, missing = _workload(signals)
    if setup is None or workload is None:
        return {"source": None, "why": why or missing, "predicted": direction_only}
    scale = spec.time_scale if spec.engine is Engine.SIM else 1.0
    timing = f"datasheet timing of {setup.model} on {setup.hardware}"
    unused = _unused(calibration, setup, [plan_config(spec), plan_config(change.spec)])
    if calibration is not None and not unused:
        # measured steps are wall-clock time already: no stand-in time scale over them
        setup = _calibrated(setup, calibration, scale)
        scale, timing = 1.0, calibration.describe()
    elif calibration is not None:
        timing += f" ({unused})"
    try:
        now = planner.run(setup, plan_config(spec), workload, rate)
        after = planner.run(setup, plan_config(change.spec), workload, rate)
    except planner.PlanError as exc:
        return {"source": None, "why": str(exc), "predicted": direction_only}
    field = ROW_FIELD[watch]
    before, later = _scaled(now.get(field), field, scale), _scaled(after.get(field), field, scale)
    moved = None if before is None or later is None else _direction(before, later)
    measured = signals.get(watch)
    return {
        "source": "planner",
        "timing": timing,
        "workload": {
            "input_len": workload.input_len,
            "output_len": workload.output_len,
            "burstiness": workload.burstiness,
            "rate": rate,
            "num_prompts": workload.num_prompts,
        },
        "time_scale": scale,
        "now": _row(now, scale),
        "after": _row(after, scale),
        "predicted": {
            "signal": watch,
            "field": field,
            "now": before,
            "after": later,
            "direction": moved,
            "agrees": moved == change.direction,
            "now_measured": measured,
            **on_measured(watch, measured, before, later, signals.get("request_rate")),
        },
    }


def on_measured(
    watch: str, measured: Any, before: float | None, later: float | None, rate: Any
) -> dict[str, Any]:
    """The forecast on the figure the page shows: `baseline` is the measured value of the
    watched signal (the advisor's, the same window), `expected` that value moved by the
    planner's change (a latency by its ratio, attainment by its difference), and `baseline_note`
    why the planner's own figure for the running layout differs, where it does by more than
    BASELINE_TOLERANCE."""
    if not isinstance(measured, int | float) or before is None or later is None:
        return {"baseline": before, "expected": later, "baseline_note": None}
    if watch == "slo_attainment":
        expected = min(1.0, max(0.0, measured + (later - before)))
    elif before > 0:
        expected = round(measured * later / before, 3)
    else:
        expected = later
    note = None
    if abs(before - measured) > BASELINE_TOLERANCE * max(abs(measured), 1e-9):
        at = f" at {rate:.3g} req/s" if isinstance(rate, int | float) else ""
        note = (
            f"the planner puts the layout that runs now at {before:.4g} where {measured:.4g} was "
            f"measured: it replays {PROMPTS} requests of the window's mean prompt and answer "
            f"lengths{at} on an idle, warm deployment (no longer or shorter requests, no "
            "queue left from before, no switch or restart in the window), so the forecast "
            "moves the measured figure by the planner's change, not to the planner's figure"
        )
    return {"baseline": measured, "expected": expected, "baseline_note": note}


def frontend_estimate(signals: dict[str, Any], fronts: int = 1, renders: int = 1) -> str:
    """How much of the busiest API server's CPU a render tier would take at this workload, by
    real vLLM's measured costs (domain/engine/frontend_cost.py): the prompt side's share. The
    busiest
    frontend after is the larger of what an engine keeps and what a render instance takes
    (`renders` of them sharing the prompt side of `fronts` engines)."""
    prompt, output = signals.get("prompt_tokens_mean"), signals.get("output_tokens_mean")
    if not prompt or not output:
        return (
            "; without the workload's prompt and answer lengths, how much it would take is unknown"
        )
    cost = VLLM_API_SERVER
    share, load = cost.render_share(prompt, output), cost.render_load_share(prompt, output)
    text = (
        f"; by vLLM's API server costs (make bench-frontend: a streamed answer token costs "
        f"{cost.output_us / cost.prompt_us:.0f}x a prompt token) the prompt side is {share:.0%} "
        f"of its CPU at this workload's {prompt:.0f} in / {output:.0f} out"
    )
    now = signals.get("frontend_cpu_share")
    if isinstance(now, int | float):
        after = busiest_after(now, share, load, fronts, renders)
        text += (
            f": with {renders} render instance(s) the busiest frontend from {now:.2f} to about "
            f"{after:.2f} cores"
        )
        if now >= SATURATED:
            text += " (or more: a saturated API server hides how much more it was asked for)"
    if share < RENDER_WORTH:
        text += "; too little to be worth a restart: the streaming stays where it is"
    return text


def plan_config(spec: DeploymentSpec) -> planner.PlanConfig:
    """The planner's layout for what a spec runs: serving roles (role moves included), the
    first group's TP per role, and the mode (NIXL pulls: read)."""
    if spec.topology is Topology.COLOCATED:
        serving = [g for g in spec.groups if g.role is Role.COLOCATED]
        return planner.PlanConfig(
            "colocated", count=sum(g.count for g in serving), tp=serving[0].tp
        )
    roles = list(instance_roles(spec).values())
    tp = {g.role: g.tp for g in reversed(spec.groups)}  # encode groups: not in the planner
    modes = {g.mode for g in spec.groups if g.mode is not None}
    mode = Mode.WRITE.value if modes == {Mode.WRITE} else Mode.READ.value
    return planner.PlanConfig(
        "disaggregated",
        prefills=roles.count(Role.PREFILL),
        prefill_tp=tp.get(Role.PREFILL, 1),
        decodes=roles.count(Role.DECODE),
        decode_tp=tp.get(Role.DECODE, 1),
        mode=mode,
    )


def _setup(spec: DeploymentSpec, proposed: DeploymentSpec) -> tuple[planner.PlanSetup | None, str]:
    timed = timed_spec(spec)
    if isinstance(timed, str):
        return None, f"{timed}: the planner cannot time it"
    model, hardware, scale = timed.model, timed.hardware, timed.time_scale
    gpus = max(plan_config(spec).gpus, plan_config(proposed).gpus)

    def per_model(ms: float | None) -> float | None:
        return None if ms is None else ms / scale  # the SLO in the planner's (modelled) time

    slo = SloTargets(
        per_model(spec.slo.ttft_ms),
        per_model(spec.slo.itl_ms),
        None,
        parse_itl_stat(spec.slo.itl_stat),
    )
    flags = {
        role: planner.EngineFlags(g.max_num_seqs, g.max_num_batched_tokens, spec.prefix_caching)
        for g in spec.groups
        for role in [g.role]
    }
    default = planner.EngineFlags(prefix_caching=spec.prefix_caching)
    return (
        planner.PlanSetup(
            model,
            hardware,
            gpus,
            colocated_flags=flags.get(Role.COLOCATED, default),
            prefill_flags=flags.get(Role.PREFILL, default),
            decode_flags=flags.get(Role.DECODE, default),
            connector=spec.connector,
            slo=slo,
        ),
        "",
    )


def _unused(
    calibration: CalibratedProfile | None,
    setup: planner.PlanSetup,
    configs: list[planner.PlanConfig],
) -> str:
    """Why the calibration cannot time these layouts ("" when it can)."""
    if calibration is None:
        return ""
    if (calibration.model, calibration.hardware) != (setup.model, setup.hardware):
        return f"the calibration is of {calibration.model} on {calibration.hardware}"
    tps = {tp for c in configs for tp in _tps(c)}
    if tps != {calibration.tp}:
        others = "/".join(f"TP{tp}" for tp in sorted(tps))
        return f"the calibration at TP{calibration.tp} does not time {others}"
    return ""


def _tps(config: planner.PlanConfig) -> list[int]:
    return [config.tp] if config.kind == "colocated" else [config.prefill_tp, config.decode_tp]


def _calibrated(
    setup: planner.PlanSetup, calibration: CalibratedProfile, scale: float
) -> planner.PlanSetup:
    """The setup on measured steps; its SLO back from the planner's modelled time to the
    wall clock the calibration measured."""
    slo = setup.slo
    ttft = None if slo.ttft_ms is None else slo.ttft_ms * scale
    itl = None if slo.itl_ms is None else slo.itl_ms * scale
    return replace(
        setup, calibration=calibration, slo=SloTargets(ttft, itl, slo.tpot_ms, slo.itl_stat)
    )


def _workload(signals: dict[str, Any]) -> tuple[planner.Workload | None, float, str]:
    needed = ("prompt_tokens_mean", "output_tokens_mean", "request_rate")
    missing = [n for n in needed if not signals.get(n)]
    if missing:
        return None, 0.0, f"the live signals lack {', '.join(missing)}: no workload to replay"
    burst = signals.get("burstiness") or 1.0
    workload = planner.Workload(
        num_prompts=PROMPTS,
        input_len=max(1, round(signals["prompt_tokens_mean"])),
        output_len=max(1, round(signals["output_tokens_mean"])),
        burstiness=min(max(burst, 0.05), 10.0),
    )
    return workload, float(signals["request_rate"]), ""


def _scaled(value: Any, field: str, scale: float) -> float | None:
    if not isinstance(value, int | float):
        return None
    return value if field == "slo_attainment" else round(value * scale, 3)


def _row(row: dict[str, Any], scale: float) -> dict[str, Any]:
    keys = ("config", "p50_ttft_ms", "p99_ttft_ms", "p50_itl_ms", "p99_itl_ms")
    out = {k: _scaled(row.get(k), k, scale) if k != "config" else row.get(k) for k in keys}
    out["slo_attainment"] = row.get("slo_attainment")
    return out


def _direction(before: float, after: float) -> str:
    if abs(after - before) <= 0.02 * max(abs(before), 1e-9):
        return "flat"
    return "down" if after < before else "up"
