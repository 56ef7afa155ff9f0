"""Running a plan request, bounded: at most MAX_ROWS (configuration, rate) runs, and a sweep
or search stops starting runs after a deadline (DEADLINE_S unless the server's
PDCTL_PLAN_DEADLINE_S says otherwise; the result says it was cut short; one run at
the request caps takes up to ~9 s). Blocking CPU work: the routes call it in a thread. A
built-in scenario runs whole (the MORI-IO one ~12 s)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastapi.exceptions import RequestValidationError

from domain import profiles
from domain.measures.slo import SloTargets, parse_itl_stat
from services.calibrations import kept_calibration
from services.plan_schema import NAMED, WORKLOAD, FlagsIn, PlanRequest, parse_config
from simulator.model.calibration.profile import CalibratedProfile
from simulator.plan import planner
from simulator.plan.nodes.placement import NodesError, resolve_nodes
from simulator.plan.scenarios import SCENARIOS, mori_io_qwen3_235b, mori_io_setup

MAX_ROWS = 80  # the published scenario: 4 configurations x 20 rates
DEADLINE_S = 15.0


def kept_profile(req: PlanRequest, calibrations: Any) -> CalibratedProfile | None:
    """The profile `req.calibration_of` names, checked against the plan's model and hardware;
    a 422 at calibration_of when there is none or it is of something else."""
    name = req.calibration_of
    if name is None or req.scenario is not None:
        return None
    kept = kept_calibration(calibrations, name)
    if kept.profile is None:
        raise _invalid(("calibration_of",), f"deployment {name!r} has no calibrated profile")
    profile = kept.profile
    if (profile.model, profile.hardware) != (req.model, req.hardware):
        raise _invalid(
            ("calibration_of",),
            f"{name}'s profile is of {profile.model} on {profile.hardware}, "
            f"not {req.model} on {req.hardware}",
        )
    return profile


def _invalid(loc: tuple[str | int, ...], msg: str) -> RequestValidationError:
    return RequestValidationError([{"loc": ("body", *loc), "msg": msg, "type": "value_error"}])


def setup_of(req: PlanRequest) -> planner.PlanSetup:
    def flags(f: FlagsIn) -> planner.EngineFlags:
        return planner.EngineFlags(f.max_num_seqs, f.max_num_batched_tokens, f.prefix_caching)

    s = req.slo
    try:
        budget, nodes, per_node = resolve_nodes(
            req.gpus if "gpus" in req.model_fields_set else None,
            req.nodes,
            req.gpus_per_node,
            profiles.hardware(req.hardware).gpus_per_node,
            planner.PLAN_DEFAULTS.gpus,
        )
    except NodesError as exc:
        raise _invalid((exc.field,), exc.message) from None
    return planner.PlanSetup(
        req.model,
        req.hardware,
        budget,
        flags(req.colocated_flags),
        flags(req.prefill_flags),
        flags(req.decode_flags),
        req.link_gbps,
        slo=SloTargets(s.ttft_ms, s.itl_ms, None, parse_itl_stat(s.itl_stat)),
        goodput_share=req.goodput_share,
        nodes=nodes,
        gpus_per_node=per_node,
        nics_per_node=req.nics_per_node,
        nic_gbit=req.nic_gbps,
        placement=req.placement,
    )


def _configs(req: PlanRequest, setup: planner.PlanSetup) -> list[planner.PlanConfig]:
    """The configurations to run, each checked against the node; 422 naming the one that
    does not fit, or the rows over MAX_ROWS."""
    if req.search:
        configs = planner.fitting_configs(setup, tuple(req.search_modes))
    else:
        configs = [parse_config(c) for c in req.configs]
        for i, c in enumerate(configs):
            try:
                setup.check(c)
            except planner.PlanError as exc:
                raise _invalid(("configs", i), str(exc).removeprefix("--config ")) from None
    rows = len(configs) * len(req.rates)
    if rows > MAX_ROWS:
        fewer = "GPUs or search modes" if req.search else "configurations"
        raise _invalid(
            ("rates",),
            f"{len(configs)} configurations x {len(req.rates)} rates is "
            f"{rows} runs; at most {MAX_ROWS}: fewer rates, or fewer {fewer}",
        )
    return configs


def execute(
    req: PlanRequest,
    deadline_s: float | None = None,
    calibration: CalibratedProfile | None = None,
) -> dict[str, Any]:
    """Run the plan (blocking CPU work: call it in a thread); a sweep or search starts no
    run after `deadline_s` (DEADLINE_S when not given). `calibration`: the profile
    `req.calibration_of` names (the caller reads it from the store)."""
    deadline_s = DEADLINE_S if deadline_s is None else deadline_s
    started = time.perf_counter()
    if req.scenario is not None:
        result = {**SCENARIOS[req.scenario](), "scenario": req.scenario}
        if SCENARIOS[req.scenario] is mori_io_qwen3_235b:
            result.update(_context_of(mori_io_setup(), list(NAMED.values()), WORKLOAD))
    else:
        setup = replace(setup_of(req), calibration=calibration)
        configs = _configs(req, setup)
        workload = planner.Workload(**req.workload.model_dump())
        rates: list[float] = list(req.rates)  # type: ignore[arg-type]  # the validator made it a list
        result = (_search if req.search else _sweep)(setup, configs, workload, rates, deadline_s)
        result.update(_context_of(setup, configs, workload))
    result["wall_s"] = round(time.perf_counter() - started, 3)
    return result


def _sweep(
    setup: planner.PlanSetup,
    configs: list[planner.PlanConfig],
    workload: planner.Workload,
    rates: list[float],
    deadline_s: float,
) -> dict[str, Any]:
    result = planner.sweep(setup, configs, workload, rates, _deadline(deadline_s))
    return {"mode": "sweep", **_stopped(result, deadline_s)}


def _search(
    setup: planner.PlanSetup,
    configs: list[planner.PlanConfig],
    workload: planner.Workload,
    rates: list[float],
    deadline_s: float,
) -> dict[str, Any]:
    result = planner.sweep(setup, configs, workload, rates, _deadline(deadline_s))
    return {"mode": "search", **_stopped(result, deadline_s), **planner.rank(result, setup)}


def _deadline(deadline_s: float) -> Callable[[], bool]:
    stop_at = time.perf_counter() + deadline_s
    return lambda: time.perf_counter() > stop_at


def _stopped(result: dict[str, Any], deadline_s: float) -> dict[str, Any]:
    if "truncated" in result:
        result["truncated"] = f"stopped after {deadline_s:g} s: {result['truncated']}"
    return result


def _context_of(
    setup: planner.PlanSetup, configs: list[planner.PlanConfig], workload: planner.Workload
) -> dict[str, Any]:
    """What the advisor needs beside the rows (observe/advice/signals.py `from_plan`)."""
    return {
        "model": setup.model,
        "hardware": setup.hardware,
        "gpus": setup.gpus,
        "nodes": setup.nodes,
        "kv_bytes_per_token": profiles.model(setup.model).kv_bytes_per_token,
        "workload": {k: getattr(workload, k) for k in workload.__dataclass_fields__},
        "topologies": {c.label: c.kind for c in configs},
        "links_gbps": {
            c.label: round(setup.link_bytes_per_s(c) / 1e9, 3)
            for c in configs
            if c.kind == "disaggregated"
        },
    }
