"""Running a rollout's steps: plan them, perform each within its deadline, tell the proxy
what runs, and on a failure or an abort put routing back and roll back.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from controller.clients.proxy_admin import ProxyAdminError
from controller.launch.registry_expect import expected_registrations
from controller.rollout import strategies
from controller.rollout.calls import one_line, quiet, safe
from controller.rollout.changes import Change, Running, changes, forced
from controller.rollout.goal import ACTOR, Goal, Run, tell
from controller.rollout.ledger import Ledger
from controller.rollout.record import ABORTED, DONE, FAILED
from controller.rollout.strategies import Layout, RolloutRejected
from controller.switch.plan import Step
from controller.switch.steps import AdminCalls, Execution
from domain.errors import PdctlError
from domain.modes import TRANSFER_MODES

log = logging.getLogger("pdctl.rollout")
BOTH_MODES = tuple(m.value for m in TRANSFER_MODES)
# A process on its way up or down (the supervisor brings it back, or it is being dropped).
ON_ITS_WAY = ("STARTING", "BACKOFF", "EXITED", "STOPPING")


class Runner(Ledger):
    """Plans a rollout and runs its steps, then settles it (and rolls back on a failure)."""

    # -- planning --------------------------------------------------------------------------

    async def changes(self, goal: Goal) -> list[Change]:
        """What the rollout must do to each process (nothing for what runs as it should)."""
        name = goal.name
        if goal.target.spec.attached:  # pdctl runs none of its processes
            return []
        now = (
            {
                n: Running(launch, state, healthy, revision)
                for n, (launch, state, healthy, revision) in self.supervisor.running(name).items()
            }
            if name in self.supervisor.deployments
            else {}
        )
        wanted = await self.supervisor.placed_launches(name, goal.target.spec, goal.target.ports)
        return changes(now, wanted)

    def layout(self, goal: Goal) -> Layout:
        kv = goal.target.spec.kv_backend
        return Layout(
            registers=kv is not None and kv.registers,
            both_modes=goal.kind == "switch",
        )

    async def plan(self, goal: Goal) -> tuple[list[Step], list[Change], str]:
        found = await self.changes(goal)
        if goal.kind == "restart":
            found = forced(found, goal.force)
        layout = self.layout(goal)
        if goal.steps is not None:
            return goal.steps, found, goal.strategy or "roll"
        strategy = goal.strategy or strategies.default(found, layout)
        return strategies.plan(strategy, found, goal.target.spec, layout), found, strategy

    # -- running ---------------------------------------------------------------------------

    async def _let_settle(self, name: str) -> None:
        """Until what the new supervisor adopted or brings back is up (or given up), within a
        readiness wait: routing put back before would send requests where nothing serves,
        and a plan made from a process still starting counts it wrong."""
        deadline = self.clock.now() + self.timeouts.ready_s
        while self.clock.now() < deadline and any(
            u["state"] in ON_ITS_WAY for u in self.supervisor.status(name)
        ):
            await self.clock.sleep(self.timeouts.poll_s)

    async def _main(self, run: Run, execute: bool = True) -> None:
        name = run.goal.name
        try:
            if execute:
                await self._execute(run)
            if run.outcome in (FAILED, ABORTED) and self._should_roll_back(run):
                try:
                    await self._roll_back(run)
                finally:
                    await self._release(run)  # done already, unless the rollback raised
            elif run.held or run.whole:  # no rollback: what it restarted comes up first
                try:
                    await self._let_settle(name)
                finally:
                    await self._release(run)
            self._settle(run)
            if run.rolls_back is not None:
                self._settle_origin(run.rolls_back, rolled_back=run.outcome == DONE)
        finally:
            self._active.pop(name, None)
            self._tasks.pop(name, None)

    async def _execute(self, run: Run) -> None:
        rec, goal = run.rec, run.goal
        ports = goal.target.ports
        proxy_ports = (
            self.supervisor.deployments[goal.name].ports
            if goal.name in self.supervisor.deployments
            else ports
        )
        admin = goal.admin or self.admin_for(goal.name, proxy_ports)
        execution = Execution(
            self.supervisor,
            admin,
            self.clock,
            goal.name,
            self.timeouts,
            revision=goal.target.revision,
            known_urls=run.urls,
            mover=goal.mover,
            target_ports=ports,
            # A proxy restarting in this apply takes its expectations from its launch.
            on_applied=lambda: quiet(self._expect_meanwhile(run, admin)),
        )
        rejected_before = 0
        try:
            if goal.kind != "start":
                rejected_before = await safe(admin.rejected(), 0)
            if rec.error is not None:  # could not even be planned (a resumed rollout)
                raise RolloutRejected(rec.error)
            rec.current = "expect what runs and what will run"
            # A proxy that is down now is told again after each apply, and a proxy that
            # restarts is started with them: no reason to fail here.
            await quiet(self._expect_meanwhile(run, admin))
            for index, step in enumerate(run.steps):
                await self._step(run, execution, index, step)
                if index + 1 == run.inline:
                    tell(run, None)
            rec.step_index = len(run.steps)
            if goal.mover is None:  # a role move stamps the revision it writes itself
                target = goal.target
                self.supervisor.settle_done(goal.name, target.spec, target.ports, target.revision)
            run.outcome = DONE
        except asyncio.CancelledError:
            if run.aborted_by is None:  # the control plane stops: left for the next one
                rec.undo_left = await execution.undo()
                self._save(rec)
                await admin.aclose()
                raise
            self._fail(run, f"aborted by {run.aborted_by}", ABORTED)
            rec.aborted_by = run.aborted_by
            rec.undo_left = await self._undo(run, execution)
        except Exception as exc:  # every step's failure ends the rollout, named, never silent
            if not isinstance(exc, PdctlError | TimeoutError | ProxyAdminError):
                log.exception("%s: rollout %s failed at %s", goal.name, rec.id, rec.current)
            self._fail(run, one_line(exc), FAILED)
            tell(run, exc)
            rec.undo_left = await self._undo(run, execution)
        finally:
            tell(run, None)
            if run.outcome is not None:
                try:
                    await self._after(run, execution, admin, rejected_before)
                except Exception as exc:  # the steps are over: it ends all the same
                    log.exception("%s: rollout %s: telling the proxy what runs", goal.name, rec.id)
                    rec.undo_left.append(f"telling the proxy what runs: {one_line(exc)}")

    async def _undo(self, run: Run, execution: Execution) -> list[str]:
        """Routing put back. A rollout that rolls back, or that restarted processes, keeps
        holding (its rollback holds too) and keeps whole requests served until the processes
        its rollback brings back, or those it restarted, serve (`_release`)."""
        if self._should_roll_back(run) or execution.applied:
            run.held |= set(execution.paused)
            run.whole |= set(execution.whole)
        return await execution.undo(keep=bool(run.held or run.whole))

    async def _release(self, run: Run) -> None:
        """Resume what a hold left paused for its rollback (if the rollback did not), end the
        whole requests keep-serving left on."""
        if not (run.held or run.whole):
            return
        name = run.goal.name
        ports = (
            self.supervisor.deployments[name].ports
            if name in self.supervisor.deployments
            else run.goal.target.ports
        )
        admin = self.admin_for(name, ports)
        try:
            for group in sorted(run.held):
                try:
                    await admin.resume(group)
                except (ProxyAdminError, OSError) as exc:
                    run.rec.undo_left.append(f"resume {group}: {one_line(exc)}")
            for url in sorted(run.whole):
                try:
                    await admin.set_whole(url, False)
                except (ProxyAdminError, OSError) as exc:
                    run.rec.undo_left.append(f"whole off {url}: {one_line(exc)}")
        finally:
            await admin.aclose()
        run.held, run.whole = set(), set()

    async def _step(self, run: Run, execution: Execution, index: int, step: Step) -> None:
        rec = run.rec
        state = rec.step_states[index]
        rec.step_index, rec.current, state.state = index, step.describe(), "running"
        self._save(rec)
        started = self.clock.now()
        try:
            # Not asyncio.wait_for: on Python 3.11 it drops a cancellation (an abort, the
            # plane stopping) that arrives as the step completes, and the rollout runs on.
            async with asyncio.timeout(state.deadline_s):
                await execution.do(step)
        except TimeoutError as exc:
            state.state, state.error = "failed", str(exc) or f"deadline {state.deadline_s:g} s"
            state.seconds = round(self.clock.now() - started, 3)
            raise TimeoutError(state.error) from None  # the failure names the step
        except BaseException as exc:
            state.state, state.error = "failed", one_line(exc) or type(exc).__name__
            state.seconds = round(self.clock.now() - started, 3)
            raise
        state.state, state.seconds = "done", round(self.clock.now() - started, 3)
        rec.timings.append({"step": step.describe(), "seconds": state.seconds})

    async def _expect_meanwhile(self, run: Run, admin: AdminCalls) -> None:
        """A MoRIIO proxy accepts registrations from what runs now and what will run (in
        either mode during a switch) until the rollout ends."""
        goal = run.goal
        kv = goal.target.spec.kv_backend
        dep = self.supervisor.deployments.get(goal.name)
        if dep is None or kv is None or not kv.registers or goal.kind == "start":
            return
        host = self.supervisor.engine_addresses(goal.name)
        also = BOTH_MODES if goal.kind == "switch" else ()
        entries = expected_registrations(dep.spec, dep.ports, host, also_modes=also)
        for spec, ports in dep.older.values():
            entries += expected_registrations(spec, ports, host, also_modes=also)
        entries += expected_registrations(goal.target.spec, goal.target.ports, host, also)
        await admin.expect(_unique(entries))

    async def _after(
        self, run: Run, execution: Execution, admin: AdminCalls, rejected_before: int
    ) -> None:
        """Tell the proxy what runs now; keep the windows and refusals the rollout caused."""
        rec, goal = run.rec, run.goal
        rec.held_s, rec.degraded_s, rec.current = execution.held_s, execution.degraded_s, None
        dep = self.supervisor.deployments.get(goal.name)
        kv = goal.target.spec.kv_backend
        try:
            if dep is not None and kv is not None and kv.registers:
                host = self.supervisor.engine_addresses(goal.name)
                entries = expected_registrations(dep.spec, dep.ports, host)
                for spec, ports in dep.older.values():
                    entries += expected_registrations(spec, ports, host)
                await safe(admin.expect(_unique(entries)), None)
            if goal.kind != "start":
                now = await safe(admin.rejected(), rejected_before)
                rec.rejected = max(0, now - rejected_before)
        finally:
            await admin.aclose()

    def _should_roll_back(self, run: Run) -> bool:
        goal = run.goal
        return (
            goal.auto_rollback
            and goal.back is not None
            and goal.kind != "rollback"
            and goal.name in self.supervisor.deployments
        )

    async def _roll_back(self, run: Run) -> None:
        """Back to the last applied revision, by the same engine, as a rollout of its own."""
        goal = run.goal
        assert goal.back is not None
        back = Goal(
            goal.name,
            goal.back,
            "rollback",
            ACTOR,
            f"rolls back rollout {run.rec.id}: {run.rec.error}",
            strategy="hold" if run.held else None,  # requests held stay held until it serves
            settles=False,
            auto_rollback=False,
        )
        try:
            steps, found, strategy = await self.plan(back)
        except Exception as exc:
            run.rec.error = f"{run.rec.error}; rollback could not be planned: {one_line(exc)}"
            run.rollback_ok = False
            await self._release(run)
            return
        run.rec.state = run.outcome or FAILED  # ended: the store holds one active rollout
        self._save(run.rec)
        sub = Run(back, self._new_record(back, steps, found, strategy), steps)
        sub.rec.rollback_of = run.rec.id
        sub.urls = {**run.urls, **{c.name: c.url for c in found if c.url}}
        run.rec.rolled_back_by = sub.rec.id
        self._save(run.rec)
        self._active[goal.name] = sub
        self._emit_begin(sub)
        await self._execute(sub)
        # Before either record says it ended: nothing is still held once they do, and no
        # reader sees the rollout ended with its revision still in progress.
        await self._release(run)
        self._settle(sub)
        self._active[goal.name] = run
        run.rollback_ok = sub.outcome == DONE


def _unique(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_url: dict[str, dict[str, Any]] = {}
    for entry in entries:
        seen = by_url.get(entry["url"])
        if seen is None:
            by_url[entry["url"]] = dict(entry)
        else:
            seen["modes"] = sorted({*seen["modes"], *entry["modes"]})
    return list(by_url.values())
