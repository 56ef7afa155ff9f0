"""A saved `pdctl bench --save-requests` result as the calibration reads it: its rates, each
with its workload and per-request records, checked field by field (CalibrationError names
the field that is wrong). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from domain import profiles
from simulator.plan.planner import Workload


class CalibrationError(ValueError):
    """Measurements the calibration cannot use; `field` names what is wrong in the bench
    result (the API's 422 names it, the CLI names its flag)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Run:
    """One rate of a bench result, as the calibration reads it."""

    rate: float
    workload: Workload
    requests: list[dict[str, Any]]
    cached: bool  # its prompts repeat an earlier run's: the server's prefix cache had them
    # the engine's mean queue/prefill/decode/TTFT seconds over the run
    # (domain/measures/engine_phases.py)
    engine_phases: dict[str, float] = field(default_factory=dict)


def read_runs(document: Any, model: str) -> list[Run]:
    """The rates of `pdctl bench --save-requests` results (each one rate or a sweep; a list
    of them for runs made apart), checked."""
    documents = document if isinstance(document, list) else [document]
    raw: list[Any] = []
    for doc in documents:
        if not isinstance(doc, dict):
            raise CalibrationError("bench", "not a pdctl bench result (a JSON object)")
        runs = doc.get("runs", [doc])
        if not isinstance(runs, list):
            raise CalibrationError("runs", "runs is not a list")
        raw += runs
    if not raw:
        raise CalibrationError("runs", "no runs in the bench result")
    seen: set[tuple] = set()
    return [_run(run, model, seen) for run in raw]


def _run(run: Any, model: str, seen: set[tuple]) -> Run:
    if not isinstance(run, dict):
        raise CalibrationError("runs", "a run is not a JSON object")
    rate = run.get("request_rate")
    label = f"the run at {rate} req/s"
    measured = run.get("model_id")
    if measured not in (model, profiles.model(model).hf_id):
        raise CalibrationError("model_id", f"{label} measured model {measured!r}, not {model!r}")
    if not isinstance(run.get("requests"), list) or not run["requests"]:
        raise CalibrationError(
            "requests", f"{label} has no per-request records (bench with --save-requests)"
        )
    _check_records(run["requests"], label)
    if not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        raise CalibrationError("request_rate", f"{label}: needs a finite rate to replay")
    for key, want in (("dataset", "random"), ("arrivals", "vllm")):
        if run.get(key, want) != want:
            got = run.get(key)
            raise CalibrationError(key, f"{label}: {key} {got!r}, the replay needs {want!r}")
    try:
        workload = Workload(
            int(run["num_prompts"]),
            int(run["input_len"]),
            int(run["output_len"]),
            float(run.get("range_ratio", 0.0)),
            float(run.get("burstiness", 1.0)),
            int(run.get("seed", 0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CalibrationError("runs", f"{label}: missing or bad {exc}") from None
    # the replay serves num_prompts requests of these lengths: bounded as `pdctl plan`'s
    if not 1 <= workload.num_prompts <= 100_000 or len(run["requests"]) > workload.num_prompts:
        raise CalibrationError("num_prompts", f"{label}: num_prompts must cover its requests")
    if not (1 <= workload.input_len <= 1_000_000 and 1 <= workload.output_len <= 1_000_000):
        raise CalibrationError("input_len", f"{label}: lengths must be 1..1000000 tokens")
    if not 0 <= workload.range_ratio < 1 or not 0 < workload.burstiness <= 100:
        raise CalibrationError("range_ratio", f"{label}: range_ratio or burstiness out of range")
    prompts = (workload.num_prompts, workload.input_len, workload.range_ratio, workload.seed)
    cached = prompts in seen
    seen.add(prompts)
    phases = run.get("engine_phases")
    if not isinstance(phases, dict) or not all(
        isinstance(v, int | float) and math.isfinite(v) for v in phases.values()
    ):
        phases = {}
    return Run(float(rate), workload, run["requests"], cached, phases)


RECORD_NUMBERS = ("start", "ttft", "prompt_tokens", "output_tokens")


def _check_records(requests: list[Any], label: str) -> None:
    """Each record as `pdctl bench --save-requests` writes it: the fit reads these fields."""
    for i, r in enumerate(requests):
        if not isinstance(r, dict):
            raise CalibrationError("requests", f"{label}: request {i} is not a JSON object")
        if not r.get("ok"):
            continue
        for key in RECORD_NUMBERS:
            value = r.get(key)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise CalibrationError("requests", f"{label}: request {i} has no {key}")
        gaps = r.get("itl")
        if not isinstance(gaps, list) or not all(
            isinstance(g, int | float) and math.isfinite(g) and g >= 0 for g in gaps
        ):
            raise CalibrationError("requests", f"{label}: request {i} has no itl list")
        if not isinstance(r.get("index", 0), int):
            raise CalibrationError("requests", f"{label}: request {i}'s index is not a number")
