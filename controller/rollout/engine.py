"""The one way a running deployment changes: a rollout toward a desired revision, by a
strategy, step by step (controller/rollout/strategies.py plans; controller/switch/steps.py
performs). Every step has a deadline; an exception in any step fails the rollout, naming the
step and the error; a failed or aborted rollout puts routing back and rolls back to the last
applied revision by the same engine, unless told not to. The record is written to the store
at every step, so `pdctl rollout status` shows it live and a control plane that restarts
takes it over (`recover`): routing put back, then on toward the same revision.

One rollout per deployment at a time: every other change is refused with a 409 that names the
rollout and the verb that ends it.

The engine is built in layers, each a module of its own: the shared state and record keeping
(ledger.py), running steps (runner.py), taking over after a restart (recovery.py); this module
holds what callers do with it.
"""

from __future__ import annotations

import asyncio
import contextlib

from controller.rollout.goal import (
    ACTOR,
    Goal,
    RolloutBusy,
    RolloutLog,
    Run,
    Target,
    TargetLoader,
    busy_message,
)
from controller.rollout.ledger import AdminFactory, Recorder
from controller.rollout.record import RolloutRecord
from controller.rollout.recovery import Recovery
from domain.errors import Conflict

__all__ = [
    "ACTOR",
    "AdminFactory",
    "Goal",
    "Recorder",
    "RolloutBusy",
    "RolloutEngine",
    "RolloutLog",
    "Target",
    "TargetLoader",
    "busy_message",
]

START_GRACE_S = 5.0  # how long a change waits for a start whose processes all run to end


class RolloutEngine(Recovery):
    """Begins, aborts and waits for rollouts; one per deployment at a time."""

    # -- actions ---------------------------------------------------------------------------

    async def let_start_end(self, name: str) -> None:
        """A start whose processes all run only waits for the proxy to list them: let it end
        (a moment) rather than refuse the change that follows it."""
        run, task = self._active.get(name), self._tasks.get(name)
        if run is None or task is None or run.rec.kind != "start":
            return
        if run.rec.step_index < run.inline or name not in self.supervisor.deployments:
            return
        if any(u["state"] != "RUNNING" for u in self.supervisor.status(name)):
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), START_GRACE_S)

    async def begin(self, goal: Goal, inline: int = 0) -> RolloutRecord:
        """Plan, write the record, then run the steps in the background (the first `inline`
        of them before returning: their errors are raised here too). RolloutBusy while
        another runs; RolloutRejected (409) or SpecInvalid (422) when it cannot be planned."""
        self._runs_here()
        await self.let_start_end(goal.name)
        self.refuse_if_running(goal.name)
        steps, found, strategy = await self.plan(goal)
        self.refuse_if_running(goal.name)  # planning awaited: check again
        run = Run(goal, self._new_record(goal, steps, found, strategy), steps, inline=inline)
        run.urls = {c.name: c.url for c in found if c.url}
        run.inline_done = asyncio.get_running_loop().create_future()
        if inline == 0:
            run.inline_done.set_result(None)
        self._active[goal.name] = run
        self._emit_begin(run)
        self._tasks[goal.name] = asyncio.create_task(self._main(run), name=f"rollout-{goal.name}")
        raised = await asyncio.shield(run.inline_done)
        if raised is not None:
            raise raised
        return run.rec

    async def abort(self, name: str, actor: str, reason: str | None = None) -> RolloutRecord:
        """Stop the rollout where it is; routing is put back and it rolls back (unless it is
        itself a rollback). Conflict when none runs."""
        run = self._active.get(name)
        if run is None:
            raise Conflict(f"no rollout of {name!r} is in progress: nothing to abort")
        if run.rec.kind == "rollback" or run.aborted_by is not None or run.outcome is not None:
            # Past its steps (ending, or rolling back): cancelling now would leave it unsettled.
            raise Conflict(
                f"{run.rec.describe()} is ending or rolling back an aborted or failed "
                "rollout; it ends by itself within its deadline"
            )
        run.aborted_by = actor + (f" ({reason})" if reason else "")
        task = self._tasks.get(name)
        if task is not None:
            task.cancel()
        return run.rec

    async def wait(self, name: str) -> RolloutRecord | None:
        task = self._tasks.get(name)
        if task is not None:
            await asyncio.shield(task)
        return self.last(name)

    async def close(self) -> None:
        """Stop running rollouts with the control plane: routing put back, each left as
        running in the store for the next control plane to take over."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
