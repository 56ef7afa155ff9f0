"""/api/.../bench: start a `pdctl bench` run or sweep against a running deployment, follow it,
stop it, and overlay finished runs as slo_attainment-vs-rate curves. A run stopped part-way
keeps the rates it had measured: `partial` says so, `result` and its curve hold those rates."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, status
from pydantic import BaseModel, Field

from services.bench_runs import compare as bench_compare
from services.bench_runs.reported import BenchReport, keep_reported
from services.bench_runs.request import BenchRequest
from state.models import BenchRun
from state.store import Current
from web.deps import Operator, StoreDep, Unavailable, get_bench_runs, get_controller, get_load_runs
from web.errors import ConfigError, Conflict

router = APIRouter(tags=["bench"])
MAX_COMPARE = 12
RunId = Annotated[int, Path(ge=1, le=2**53, description="A bench run's id")]


class BenchRunOut(BaseModel):
    id: int
    deployment: str
    revision: int
    label: str
    topology: dict[str, Any]
    config: dict[str, Any]
    status: Literal["running", "done", "failed", "stopped"]
    actor: str
    started_at: datetime
    finished_at: datetime | None
    done: int
    total: int
    max_goodput_rate: float | str | None
    error: str | None
    partial: bool = Field(
        description="Stopped part-way: `result` holds only the rates measured before it stopped"
    )
    result: dict[str, Any] | None = None

    @classmethod
    def of(cls, run: BenchRun, with_result: bool = False) -> BenchRunOut:
        return cls(
            **run.model_dump(exclude={"result"}),
            label=bench_compare.label(run),
            max_goodput_rate=bench_compare.max_goodput_rate(run),
            partial=bench_compare.partial(run),
            result=run.result if with_result else None,
        )


class PointOut(BaseModel):
    rate: float
    slo_attainment: float | None
    p99_ttft_ms: float | None
    p99_itl_ms: float | None
    request_goodput: float | None
    completed: int | None
    failed: int | None


class CurveOut(BaseModel):
    id: int
    deployment: str
    revision: int
    label: str
    status: str
    topology: dict[str, Any]
    partial: bool
    rates_offered: int
    max_goodput_rate: float | str | None
    goodput_share: float | None
    points: list[PointOut]


class CompareOut(BaseModel):
    runs: list[CurveOut]


def check_serving(request: Request, current: Current) -> None:
    """A run needs every process of the deployment up, no switch going, no other load."""
    name, controller = current.name, get_controller(request)
    if controller is None:
        raise Unavailable("this control plane runs without a controller")
    units = controller.status(name)
    down = [f"{u['name']} {u['state']}" for u in units if u["state"] != "RUNNING"]
    if not units or down:
        why = f" ({', '.join(down)})" if down else ""
        raise Conflict(
            f"deployment {name!r} is not running{why}: start it, and bench once every process runs"
        )
    active = controller.rollouts.active(name)
    # A start whose processes all run (checked above) only waits for the proxy to list them.
    if active is not None and active.kind != "start":
        raise Conflict(f"{active.describe()} of {name!r} is under way: bench after it ends")
    load = get_load_runs(request)
    if load.busy(name):
        raise Conflict(f"the dashboard's load run is going against {name!r}: stop it first")


async def start_run(request: Request, current: Current, body: BenchRequest, actor: str) -> BenchRun:
    runs = get_bench_runs(request)
    if runs.busy(current.name):  # the more useful message first
        raise Conflict(
            f"a bench run of {current.name!r} is going (run "
            f"{runs.current(current.name)}): stop it or wait for it"
        )
    check_serving(request, current)
    return await runs.start(current, body, actor)


@router.post("/deployments/{name}/bench", status_code=status.HTTP_202_ACCEPTED)
async def start(
    name: str, body: BenchRequest, request: Request, store: StoreDep, actor: Operator
) -> BenchRunOut:
    """Start a run (one rate) or a sweep (several) against the deployment's proxy; follow it
    at /bench/{id}. SLOs left out are the deployment's."""
    return BenchRunOut.of(await start_run(request, store.get(name), body, actor.label))


@router.post("/deployments/{name}/bench/runs", status_code=status.HTTP_201_CREATED)
def keep(
    name: str, body: BenchReport, request: Request, store: StoreDep, actor: Operator
) -> BenchRunOut:
    """Keep a finished run `pdctl bench --deployment NAME` made from a terminal: listed,
    shown and compared as the dashboard's own runs are."""
    run = keep_reported(get_bench_runs(request), store.get(name), body, actor.label)
    return BenchRunOut.of(run)


@router.get("/deployments/{name}/bench")
def list_runs(
    name: str, request: Request, store: StoreDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> list[BenchRunOut]:
    """The deployment's runs, newest first (results at /bench/{id})."""
    store.get(name)
    return [BenchRunOut.of(r) for r in get_bench_runs(request).store.of(name, limit)]


@router.get("/bench/compare")
def compare(
    request: Request,
    ids: Annotated[
        str,
        Query(
            pattern=r"^\d{1,9}(,\d{1,9})*$",
            max_length=200,
            description=f"Run ids, comma-separated (at most {MAX_COMPARE})",
        ),
    ],
) -> CompareOut:
    """Each run as a curve: slo_attainment, p99 TTFT and p99 ITL per offered rate."""
    return CompareOut(
        runs=[CurveOut(**bench_compare.curve(r)) for r in compare_runs(request, parse_ids(ids))]
    )


@router.get("/bench/{run_id}")
def get_run(run_id: RunId, request: Request) -> BenchRunOut:
    return BenchRunOut.of(get_bench_runs(request).store.get(run_id), with_result=True)


@router.post("/bench/{run_id}/stop", status_code=status.HTTP_202_ACCEPTED)
async def stop(run_id: RunId, request: Request, actor: Operator) -> BenchRunOut:
    return BenchRunOut.of(await get_bench_runs(request).stop(run_id, actor.label))


def parse_ids(text: str) -> list[int]:
    ids = list(dict.fromkeys(int(piece) for piece in text.split(",")))
    if len(ids) > MAX_COMPARE:
        raise TooMany.at(
            ("ids",), f"at most {MAX_COMPARE} runs compare at once, not {len(ids)}", "too_many"
        )
    return ids


def compare_runs(request: Request, ids: list[int]) -> list[BenchRun]:
    return get_bench_runs(request).store.many(ids)


class TooMany(ConfigError):
    """More runs than a chart can tell apart: a 422 naming `ids`, in FastAPI's shape."""

    title = "Invalid query"
    where = "query"
