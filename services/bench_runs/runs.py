"""Bench runs from the dashboard: a `pdctl bench` subprocess (one rate or a sweep) against a
deployment's proxy, its progress and result kept in SQLite with the revision it measured.

Bounded (services/bench_runs/request.py): rates, requests and the time their arrivals take are
capped,
the process is killed at a deadline, at most one run per deployment and a few in all. The
bench reports progress through `--progress-file` (bench/progress.py); a watcher task per run
polls that file and the process, and records how the run ended. A run stopped, killed at its
deadline or cut by a shutdown keeps the rates its sweep had measured (services/bench_runs/kept.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller import child_environment
from domain.errors import Conflict, PdctlError
from services.bench_runs.compare import rate_runs
from services.bench_runs.kept import kept_note, kept_result
from services.bench_runs.request import ROOT, BenchRequest, bench_argv
from state.bench_store import BenchStore, snapshot
from state.models import BenchRun
from state.store import Current

MAX_CONCURRENT = 3  # bench processes of this control plane at once
POLL_S = 0.5
Recorder = Callable[..., object]  # Store.record(actor, kind, message, deployment, detail)


class BenchStartFailed(PdctlError):
    title = "Bench did not start"


@dataclass
class _Active:
    run_id: int
    deployment: str
    actor: str
    proc: asyncio.subprocess.Process
    folder: Path
    deadline: float  # time.monotonic()
    total: int
    rates: int
    done: int = 0
    stopped_by: str | None = None


class BenchRuns:
    """The runs this process watches; at most one per deployment."""

    def __init__(
        self,
        store: BenchStore,
        record: Recorder,
        revision_of: Callable[[str], int] | None = None,
        proxy_url: Callable[[str, int], str] = lambda name, port: f"http://127.0.0.1:{port}",
    ) -> None:
        self.store, self.record = store, record
        self.proxy_url = proxy_url  # (deployment, proxy port) -> where its proxy answers
        # A switch may land mid-run (operators switch during incidents; a bench run must not
        # stop them): the run then says its figures span two revisions.
        self.revision_of = revision_of
        self._active: dict[str, _Active] = {}
        self._starting: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        # Rows left `running` by an earlier control plane: nothing watches them any more.
        store.abandon_running("the control plane restarted during the run")

    def busy(self, deployment: str) -> bool:
        return deployment in self._active or deployment in self._starting

    def current(self, deployment: str) -> int | None:
        active = self._active.get(deployment)
        return active.run_id if active else None

    async def start(self, current: Current, body: BenchRequest, actor: str) -> BenchRun:
        name = current.name
        if self.busy(name):
            raise Conflict(
                f"a bench run of {name!r} is going (run {self.current(name)}): "
                "stop it or wait for it"
            )
        if len(self._active) + len(self._starting) >= MAX_CONCURRENT:
            raise Conflict(f"{MAX_CONCURRENT} bench runs are going already; wait for one")
        settings = body.settings(current)
        self._starting.add(name)
        try:
            run = self.store.create(
                name, current.revision, snapshot(current.spec), settings, body.total, actor
            )
            folder = Path(tempfile.mkdtemp(prefix=f"pdctl-bench-{run.id}-"))
            proc = await self._spawn(run, settings, current, folder)
            self._active[name] = _Active(
                run.id,  # type: ignore[arg-type]  # a committed row has its id
                name,
                actor,
                proc,
                folder,
                time.monotonic() + body.deadline_s(),
                body.total,
                len(body.rates),
            )
        finally:
            self._starting.discard(name)
        self.record(
            actor,
            "bench.started",
            f"bench run {run.id} of {name} started: "
            f"{_rates(settings['rates'])} req/s x {body.num_prompts} requests "
            f"(revision {current.revision})",
            name,
            {"run": run.id},
        )
        task = asyncio.get_running_loop().create_task(self._watch(self._active[name]))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    async def stop(self, run_id: int, actor: str) -> BenchRun:
        run = self.store.get(run_id)
        active = self._active.get(run.deployment)
        if active is None or active.run_id != run_id:
            if run.status == "running":  # nothing watches it: say so in the row
                return self.store.finish(run_id, "stopped", error="stopped with no process")
            raise Conflict(f"bench run {run_id} is {run.status} already")
        active.stopped_by = actor
        with contextlib.suppress(ProcessLookupError):
            active.proc.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(active.proc.wait()), 5)
        for _ in range(50):  # the watcher records the end within a poll
            if run_id not in (a.run_id for a in self._active.values()):
                break
            await asyncio.sleep(0.05)
        return self.store.get(run_id)

    async def close(self) -> None:
        for active in list(self._active.values()):
            active.stopped_by = active.stopped_by or "pdctl (shutting down)"
            with contextlib.suppress(ProcessLookupError):
                active.proc.kill()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        for task in list(self._tasks):
            task.cancel()

    async def _spawn(
        self, run: BenchRun, settings: dict[str, Any], current: Current, folder: Path
    ) -> asyncio.subprocess.Process:
        argv = bench_argv(settings, self.proxy_url(run.deployment, current.ports.proxy), folder)
        try:
            with (folder / "stderr.log").open("wb") as err:
                return await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=ROOT,
                    env=child_environment(os.environ, {}),  # never the control plane's tokens
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=err,
                )
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            message = f"could not start pdctl bench: {exc.strerror or exc}"
            self.store.finish(run.id, "failed", error=message)  # type: ignore[arg-type]  # committed
            raise BenchStartFailed(message) from None

    async def _watch(self, active: _Active) -> None:
        proc = active.proc
        try:
            while proc.returncode is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), POLL_S)
                self._poll_progress(active)
                if proc.returncode is None and time.monotonic() > active.deadline:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await proc.wait()
                    self._end_early(active, "failed", "killed at its deadline")
                    return
            self._poll_progress(active)
            self._ended(active)
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            self._end_early(active, "stopped", "the control plane shut down")
            raise

    def _poll_progress(self, active: _Active) -> None:
        try:
            done = int(json.loads((active.folder / "progress.json").read_text())["done"])
        except (OSError, ValueError, KeyError, TypeError):
            return  # not written yet
        if done != active.done:
            active.done = done
            self.store.advance(active.run_id, done)

    def _ended(self, active: _Active) -> None:
        proc = active.proc
        if active.stopped_by is not None:
            self._end_early(active, "stopped", f"stopped by {active.stopped_by}")
            return
        result = kept_result(_read(active.folder / "result.json"))
        if proc.returncode == 0 and result is not None:
            if not any(r.get("completed") for r in rate_runs(result)):
                self._end(
                    active,
                    "failed",
                    result=result,
                    error="no request succeeded: see the proxy's log",
                )
            else:
                self._end(active, "done", result=result)
            return
        tail = _tail(active.folder / "stderr.log")
        kept = kept_note(result, active.rates) if result is not None else None
        self._end(
            active,
            "failed",
            result=result,
            error=_join(tail or f"pdctl bench exited with {proc.returncode}", kept),
        )

    def _end_early(self, active: _Active, status: str, why: str) -> None:
        """Ended from outside (stopped, deadline, shutdown): the rates a sweep had measured
        are kept, and the run says how many; a rate cut off mid-way is not."""
        result = kept_result(_read(active.folder / "result.json"))
        self._end(active, status, result=result, error=f"{why} {kept_note(result, active.rates)}")

    def _end(
        self, active: _Active, status: str, *, result: dict | None = None, error: str | None = None
    ) -> None:
        if self._active.get(active.deployment) is not active:
            return  # ended already
        done = active.total if status == "done" else active.done
        error = _join(error, self._revision_note(active))
        run = self.store.finish(active.run_id, status, done=done, result=result, error=error)
        # Only now is it no longer current: the pages read both from a worker thread, and one
        # that saw no current run while the row still said "running" showed the form beside a
        # running row, and stopped polling, so the row never changed.
        del self._active[active.deployment]
        shutil.rmtree(active.folder, ignore_errors=True)
        mgr = (result or {}).get("max_goodput_rate")
        best = f"max_goodput_rate {mgr} req/s" if mgr is not None else None
        # a stopped run says what it kept before what its kept rates sustained
        said = _join(best or error) if status == "done" else _join(error, best)
        message = f"bench run {run.id} of {run.deployment} {status}"
        if said:
            message += f": {said}"
        self.record(
            active.stopped_by or active.actor,
            f"bench.{status}",
            message[:1000],
            run.deployment,
            {"run": run.id},
        )

    def _revision_note(self, active: _Active) -> str | None:
        if self.revision_of is None:
            return None
        started = self.store.get(active.run_id).revision
        try:
            now = self.revision_of(active.deployment)
        except PdctlError:
            return None  # deleted meanwhile
        if now == started:
            return None
        return (
            f"the deployment changed during the run (revision {started} -> {now}): "
            "its figures mix both"
        )


def _join(*parts: str | None) -> str | None:
    return "; ".join(p for p in parts if p) or None


def _rates(rates: list[float]) -> str:
    return ",".join(f"{r:g}" for r in rates)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _tail(path: Path, chars: int = 400) -> str:
    try:
        return path.read_text(errors="replace").strip()[-chars:]
    except OSError:
        return ""
