"""Bench runs that ran outside the control plane: `pdctl bench --deployment NAME` measures the
deployment's proxy from the operator's terminal, then hands its result here, and the run is
kept as the dashboard's own runs are (the Bench panel lists both; a compare overlays both).

What a report may hold is checked (each problem names its field); the row it becomes is
finished at once: done when a request succeeded, failed otherwise."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
    seed: int | None = Field(None, ge=0, le=2**63 - 1)  # what SQLite stores


class RateSummary(BaseModel):
    """What the panel and a compare read of one rate's summary; the rest is kept as sent."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    request_rate: Annotated[float, Field(gt=0)] | Literal["inf"]
    slo_attainment: Annotated[float, Field(ge=0, le=1)] | None = None
    p99_ttft_ms: Annotated[float, Field(ge=0)] | None = None
    p99_itl_ms: Annotated[float, Field(ge=0)] | None = None
    request_goodput: Annotated[float, Field(ge=0)] | None = None
    completed: Annotated[int, Field(ge=0)] | None = None
    failed: Annotated[int, Field(ge=0)] | None = None


class BenchReport(BaseModel):
    """A finished `pdctl bench --deployment` run, to keep with the revision it measured."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    revision: int = Field(ge=1, le=2**31, description="The deployment's revision at its start")
    config: ReportedConfig
    result: dict[str, Any] = Field(description="bench/report.py's document (--result-json)")


def check_result(result: dict[str, Any], offered: int) -> None:
    """ConfigError at `result` unless it is a bench document (bench/report.py) of `offered`
    rates, each summary in the shape the panel and a compare read."""
    runs = rate_runs(result)
    if len(runs) != offered:
        raise ConfigError.at(
            ("result",),
            f"the result holds {len(runs)} rate(s) and the config offered {offered}: "
            "a sweep's `runs` or one rate's summary",
        )
    for index, run in enumerate(runs):
        try:
            RateSummary.model_validate(run)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ("result", "runs", index) if "runs" in result else ("result",)
            raise ConfigError.at((*where, *first["loc"]), first["msg"]) from None
    best = result.get("max_goodput_rate")
    if best is not None and not isinstance(best, int | float | str):
        raise ConfigError.at(("result", "max_goodput_rate"), 'a rate (req/s), "inf" or null')


def keep_reported(runs: BenchRuns, current: Current, report: BenchReport, actor: str) -> BenchRun:
    """The report as a finished run of `current`, and the bench.<status> event saying so (the
    deployment page's Bench panel redraws its list on it)."""
    if report.revision > current.revision:
        raise ConfigError.at(
            ("revision",), f"{current.name!r} has no revision {report.revision} yet"
        )
    check_result(report.result, len(report.config.rates))
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
