"""Bench runs in SQLite (`bench_runs`): started, advanced, finished, listed; and the snapshot of
the deployment a run measured (revision, topology, modes, P:D), so a run still says what it
measured after the deployment has changed or gone."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from domain.modes import Role
from state.errors import NotFound
from state.models import BenchRun, utcnow

RUNNING = "running"
FINISHED = ("done", "failed", "stopped")


def snapshot(spec: Any) -> dict[str, Any]:
    """What about the deployment (a controller.spec.deployment.DeploymentSpec) decides its curve:
    topology, connector, modes and P:D."""
    count = {role: sum(g.count for g in spec.groups if g.role == role) for role in Role}
    modes = sorted({g.mode.value for g in spec.groups if g.mode is not None})
    if spec.topology.value == "colocated":
        shape = f"colocated x{count[Role.COLOCATED]}"
    else:
        shape = (
            f"{'/'.join(modes) or spec.connector or 'disaggregated'} "
            f"{count[Role.PREFILL]}P{count[Role.DECODE]}D"
        )
    return {
        "topology": spec.topology.value,
        "connector": spec.connector,
        "engine": spec.engine.value,
        "model": spec.model,
        "modes": modes,
        "prefill": count[Role.PREFILL],
        "decode": count[Role.DECODE],
        "colocated": count[Role.COLOCATED],
        "shape": shape,
    }


class BenchStore:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def create(
        self,
        deployment: str,
        revision: int,
        topology: dict[str, Any],
        config: dict[str, Any],
        total: int,
        actor: str,
    ) -> BenchRun:
        run = BenchRun(
            deployment=deployment,
            revision=revision,
            topology=topology,
            config=config,
            status=RUNNING,
            actor=actor,
            total=total,
        )
        with Session(self.engine) as s:
            s.add(run)
            s.commit()
            s.refresh(run)
            return run

    def advance(self, run_id: int, done: int) -> None:
        with Session(self.engine) as s:
            s.execute(
                sa.update(BenchRun)
                .where(col(BenchRun.id) == run_id, col(BenchRun.status) == RUNNING)
                .values(done=done)
            )
            s.commit()

    def finish(
        self,
        run_id: int,
        status: str,
        *,
        done: int | None = None,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> BenchRun:
        if status not in FINISHED:
            raise ValueError(f"a run finishes as one of {FINISHED}, not {status!r}")
        with Session(self.engine) as s:
            run = _get(s, run_id)
            run.status, run.finished_at = status, utcnow()
            run.result, run.error = result, error
            if done is not None:
                run.done = done
            s.add(run)
            s.commit()
            s.refresh(run)
            return run

    def abandon_running(self, message: str) -> int:
        """Mark every run still `running` as failed: nothing of this process watches them
        (the control plane restarted under them). Returns how many."""
        with Session(self.engine) as s:
            result = s.exec(
                sa.update(BenchRun)
                .where(col(BenchRun.status) == RUNNING)
                .values(status="failed", error=message, finished_at=utcnow())
            )
            s.commit()
            return result.rowcount

    def get(self, run_id: int) -> BenchRun:
        with Session(self.engine) as s:
            return _get(s, run_id)

    def many(self, run_ids: list[int]) -> list[BenchRun]:
        """The runs in the order asked; NotFound names the first id that is not there."""
        with Session(self.engine) as s:
            rows = {r.id: r for r in s.exec(select(BenchRun).where(col(BenchRun.id).in_(run_ids)))}
        for run_id in run_ids:
            if run_id not in rows:
                raise NotFound(f"no bench run {run_id}")
        return [rows[i] for i in run_ids]

    def of(self, deployment: str, limit: int = 50) -> list[BenchRun]:
        """A deployment's runs, newest first."""
        with Session(self.engine) as s:
            return list(
                s.exec(
                    select(BenchRun)
                    .where(BenchRun.deployment == deployment)
                    .order_by(col(BenchRun.id).desc())
                    .limit(limit)
                )
            )


def _get(s: Session, run_id: int) -> BenchRun:
    run = s.get(BenchRun, run_id)
    if run is None:
        raise NotFound(f"no bench run {run_id}")
    return run
