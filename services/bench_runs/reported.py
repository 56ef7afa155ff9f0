"""Bench runs that ran outside the control plane: `pdctl bench --deployment NAME` measures the
deployment's proxy from the operator's terminal, then hands its result here, and the run is
kept as the dashboard's own runs are (the Bench panel lists both; a compare overlays both).

What a report may hold is checked (each problem names its field); the row it becomes is
finished at once: done when a request succeeded, failed otherwise."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from domain.errors import ConfigError
from services.bench_runs.compare import max_goodput_rate, rate_runs
from services.bench_runs.runs import BenchRuns
from state.bench_store import snapshot
from state.models import BenchRun
from state.store import Current

SOURCE = "pdctl bench"  # config["source"]: where a reported run came from
MAX_REPORTED_RATES = 64


class ReportedConfig(BaseModel):
    """The flags the run was given that decide its curve (bench/cli.py's), SLOs as judged."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    rates: list[Annotated[float, Field(gt=0, le=1e6)] | Literal["inf"]] = Field(
        min_length=1,
        max_length=MAX_REPORTED_RATES,
        description='Offered rates (req/s), in order; "inf" sends every request at once',
    )
    num_prompts: int = Field(ge=1, le=10_000_000, description="Requests per rate")
    input_len: int | None = Field(None, ge=1, le=10_000_000)
    output_len: int | None = Field(None, ge=1, le=10_000_000)
    dataset: str | None = Field(None, max_length=40)
    slo_ttft_ms: float | None = Field(None, gt=0)
    slo_itl_ms: float | None = Field(None, gt=0)
    itl_slo_stat: str | None = Field(None, max_length=8)
    burstiness: float | None = Field(None, gt=0)
    seed: int | None = Field(None, ge=0)


class BenchReport(BaseModel):
    """A finished `pdctl bench --deployment` run, to keep with the revision it measured."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    revision: int = Field(ge=1, le=2**31, description="The deployment's revision at its start")
    config: ReportedConfig
    result: dict[str, Any] = Field(description="bench/report.py's document (--result-json)")


def bench_shaped(result: dict[str, Any]) -> bool:
    """Whether `result` is a bench document: at least one rate, each with its request_rate."""
    runs = rate_runs(result)
    return bool(runs) and all(isinstance(r, dict) and "request_rate" in r for r in runs)


def keep_reported(runs: BenchRuns, current: Current, report: BenchReport, actor: str) -> BenchRun:
    """The report as a finished run of `current`, and the bench.<status> event saying so (the
    deployment page's Bench panel redraws its list on it)."""
    if report.revision > current.revision:
        raise ConfigError.at(
            ("revision",), f"{current.name!r} has no revision {report.revision} yet"
        )
    if not bench_shaped(report.result):
        raise ConfigError.at(
            ("result",),
            "not a bench result: a sweep's `runs` or one rate's summary, each with "
            "its request_rate",
        )
    config = {**report.config.model_dump(), "source": SOURCE}
    total = report.config.num_prompts * len(report.config.rates)
    run = runs.store.create(
        current.name, report.revision, snapshot(current.spec), config, total, actor
    )
    succeeded = any(r.get("completed") for r in rate_runs(report.result))
    status = "done" if succeeded else "failed"
    notes = [None if succeeded else "no request succeeded: see the proxy's log"]
    if report.revision != current.revision:
        notes.append(
            f"the deployment changed during the run (revision {report.revision} -> "
            f"{current.revision}): its figures mix both"
        )
    error = "; ".join(n for n in notes if n) or None
    run = runs.store.finish(
        run.id,  # type: ignore[arg-type]  # a committed row has its id
        status,
        done=total,
        result=report.result,
        error=error,
    )
    best = max_goodput_rate(run)
    said = f"max_goodput_rate {best} req/s" if best is not None and succeeded else error
    runs.record(
        actor,
        f"bench.{status}",
        f"bench run {run.id} of {current.name} {status} ({SOURCE} from a terminal)"
        + (f": {said}" if said else ""),
        current.name,
        {"run": run.id, "source": SOURCE},
    )
    return run
