"""The one way a running deployment changes: a rollout toward a desired revision, by a
strategy, step by step (controller/rollout/strategies.py plans; controller/switch/steps.py
performs). Every step has a deadline; an exception in any step fails the rollout, naming the
step and the error; a failed or aborted rollout puts routing back and rolls back to the last
applied revision by the same engine, unless told not to. The record is written to the store
at every step, so `pdctl rollout status` shows it live and a control plane that restarts
takes it over (`recover`): routing put back, then on toward the same revision.

One rollout per deployment at a time: every other change is refused with a 409 that names the
rollout and the verb that ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.clients.proxy_admin import ProxyAdminClient, ProxyAdminError
from controller.launch.ports import AllocatedPorts
from controller.launch.registry_expect import expected_registrations
from controller.rollout import strategies
from controller.rollout.changes import Action, Change, Running, changes, forced
from controller.rollout.record import (
    ABORTED,
    DONE,
    FAILED,
    RolloutRecord,
    StepState,
    outcome_message,
    settle_detail,
)
from controller.rollout.routing import whole_needed
from controller.rollout.strategies import Layout, RolloutRejected
from controller.spec.deployment import DeploymentSpec
from controller.supervise.clock import Clock, SystemClock
from controller.supervise.supervisor import Supervisor
from controller.switch.plan import Step
from controller.switch.steps import AdminCalls, Execution, Timeouts
from domain.errors import Conflict, PdctlError
from domain.modes import TRANSFER_MODES
from state.changes import RevisionState

log = logging.getLogger("pdctl.rollout")
ACTOR = "controller"
BOTH_MODES = tuple(m.value for m in TRANSFER_MODES)
START_GRACE_S = 5.0  # how long a change waits for a start whose processes all run to end
STOPPED_MID_ROLLOUT = "the control plane stopped during this rollout"
# A process on its way up or down (the supervisor brings it back, or it is being dropped).
ON_ITS_WAY = ("STARTING", "BACKOFF", "EXITED", "STOPPING")
TAKING_OVER = "taking over: waiting for what starts, then routing put back"

Recorder = Callable[[str, str, str, str | None, dict | None], object]  # Store.record
AdminFactory = Callable[[str, AllocatedPorts], AdminCalls]


class RolloutBusy(Conflict):
    """A rollout holds the deployment; the message names it and the verbs that end it."""

    title = "A rollout is in progress"


class RolloutLog(Protocol):
    """Where rollouts and the revisions they settle are kept (state/store/)."""

    def new_rollout(self, name: str, body: dict[str, Any]) -> int: ...
    def save_rollout(self, rollout_id: int, body: dict[str, Any]) -> None: ...
    def rollouts(self, name: str, limit: int = ...) -> list[dict[str, Any]]: ...
    def unfinished(self) -> list[dict[str, Any]]: ...
    def start_samples(self, name: str, per_group: int = ...) -> dict[str, list[float]]: ...
    def add_start_samples(self, name: str, group: str, seconds: list[float]) -> None: ...
    def settle_change(
        self, name: str, revision: int, state: str, detail: str | None = None
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Target:
    """A revision as it runs: its number, spec and ports."""

    revision: int
    spec: DeploymentSpec
    ports: AllocatedPorts


TargetLoader = Callable[[str, int], Target]  # (deployment, revision) -> Target


@dataclass
class Goal:
    """What one rollout is asked to do."""

    name: str
    target: Target
    kind: str
    actor: str
    reason: str | None = None
    strategy: str | None = None  # None: roll where the layout allows it, else hold
    steps: list[Step] | None = None  # planned elsewhere (a mode switch's, a role move's)
    settles: bool = True  # the target revision is in progress: the rollout settles it
    back: Target | None = None  # where a failure rolls back to (the last applied revision)
    auto_rollback: bool = True
    switch_mode: str | None = None  # a mode switch's target mode
    forecast: dict[str, Any] | None = None
    mover: Callable[[Step], Awaitable[None]] | None = None  # a role move's step
    force: set[str] | None = None  # a restart: these restart even if unchanged (None: all)
    # The proxy's calls when it is not the one the supervisor runs (an attached deployment's)
    admin: AdminCalls | None = None


@dataclass
class _Run:
    goal: Goal
    rec: RolloutRecord
    steps: list[Step]
    urls: dict[str, str] = field(default_factory=dict)
    aborted_by: str | None = None
    # How the steps ended (done | failed | aborted); the record says so only once settled,
    # so a reader never sees it ended with its revision still in progress.
    outcome: str | None = None
    rollback_ok: bool | None = None
    inline: int = 0  # steps the caller waits for (a start's first: its errors are the caller's)
    inline_done: asyncio.Future | None = None
    # A rollback taken over from a stopped plane: the rollout it rolls back, whose revision
    # is still in progress, settled once this ends (else nothing would release it).
    rolls_back: RolloutRecord | None = None
    # Groups a hold left paused, and instances keep-serving left serving whole requests,
    # for its rollback to release: what served the requests otherwise may be down, and
    # requests let go now would meet nothing to serve them.
    held: set[str] = field(default_factory=set)
    whole: set[str] = field(default_factory=set)


class RolloutEngine:
    def __init__(
        self,
        supervisor: Supervisor,
        record: Recorder,
        log_: RolloutLog,
        load: TargetLoader,
        clock: Clock | None = None,
        admin_for: AdminFactory | None = None,
        timeouts: Timeouts | None = None,
    ) -> None:
        self.supervisor, self.record, self.log, self.load = supervisor, record, log_, load
        self.clock = clock or SystemClock()
        self.admin_for = admin_for or self._http_admin
        self.timeouts = timeouts or Timeouts()
        self._active: dict[str, _Run] = {}
        self._tasks: dict[str, asyncio.Task] = {}

    # -- queries ---------------------------------------------------------------------------

    def active(self, name: str) -> RolloutRecord | None:
        run = self._active.get(name)
        return run.rec if run is not None else None

    def refuse_if_running(self, name: str, verb: str = "change") -> None:
        rec = self.active(name)
        if rec is not None:
            raise RolloutBusy(busy_message(rec, verb))

    def history(self, name: str, limit: int = 50) -> list[RolloutRecord]:
        """Newest first, from the store (so they outlive the control plane); the live one as
        this engine sees it."""
        live = self.active(name)
        out = []
        for body in self.log.rollouts(name, limit):
            rec = RolloutRecord.from_json(body)
            out.append(live if live is not None and live.id == rec.id else rec)
        return out

    def find(self, name: str, rollout_id: str) -> RolloutRecord | None:
        return next((r for r in self.history(name, 500) if r.id == rollout_id), None)

    def last(self, name: str) -> RolloutRecord | None:
        found = self.history(name, 1)
        return self.active(name) or (found[0] if found else None)

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
        await self.let_start_end(goal.name)
        self.refuse_if_running(goal.name)
        steps, found, strategy = await self.plan(goal)
        self.refuse_if_running(goal.name)  # planning awaited: check again
        run = _Run(goal, self._new_record(goal, steps, found, strategy), steps, inline=inline)
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

    def recover(self) -> list[RolloutRecord]:
        """Take over each rollout a stopped control plane left running: routing put back,
        then on toward the same revision (a rollback toward the revision it rolls back to)."""
        taken = []
        for body in self.log.unfinished():
            rec = RolloutRecord.from_json(body)
            name = rec.deployment
            if name in self._active:
                continue
            try:
                target = self.load(name, rec.revision)
            except Exception as exc:  # the revision is gone or unreadable: end it failed
                self._end_orphan(rec, f"{STOPPED_MID_ROLLOUT}; its revision: {exc}")
                continue
            if name not in self.supervisor.deployments:
                self._end_orphan(rec, f"{STOPPED_MID_ROLLOUT}; {name} is not supervised here")
                continue
            rec.resumed += 1
            goal = Goal(
                name,
                target,
                rec.kind,
                rec.actor,
                rec.reason,
                strategy=_resumable(rec.strategy),
                settles=rec.kind not in ("rollback", "restart")
                and rec.revision_state == RevisionState.IN_PROGRESS.value,
                back=self._back_of(rec),
                auto_rollback=rec.auto_rollback,
                switch_mode=rec.target if rec.kind == "switch" else None,
            )
            run = _Run(goal, rec, [], rolls_back=self._unsettled_origin(rec))
            self._active[name] = run
            self.record(
                ACTOR,
                "rollout.resume",
                f"{name}: {STOPPED_MID_ROLLOUT} at {rec.current!r}; routing put back, "
                f"on toward revision {rec.revision}",
                name,
                {"rollout": rec.id, "revision": rec.revision},
            )
            self._tasks[name] = asyncio.create_task(self._resume(run), name=f"rollout-{name}")
            taken.append(rec)
        self._close_unended()
        return taken

    def _close_unended(self) -> None:
        """A rollout saved failed whose rollback never began (the control plane stopped in
        between) has no end yet: it ends now, so nothing waits on it for ever."""
        for name in list(self.supervisor.deployments):
            if name in self._active:
                continue
            for body in self.log.rollouts(name, 5):
                rec = RolloutRecord.from_json(body)
                if rec.state in (FAILED, ABORTED) and rec.ended_at is None:
                    rec.ended_at = self.clock.wall()
                    rec.undo_left.append(STOPPED_MID_ROLLOUT + " before its rollback began")
                    self._save(rec)

    # -- running ---------------------------------------------------------------------------

    async def _resume(self, run: _Run) -> None:
        run.rec.current = TAKING_OVER
        try:
            # Routing stays as the stopped plane left it (held, whole, drained) while what it
            # was restarting comes up: that is what keeps requests served meanwhile.
            await self._let_settle(run.goal.name)
            await self._put_back(run)
            steps, found, strategy = await self.plan(run.goal)
        except asyncio.CancelledError:
            if run.aborted_by is None:  # the control plane stops again: left for the next
                raise
            # Aborted before its steps began again: it ends aborted, and rolls back; routing
            # the stopped plane left (groups held) is put back once what starts is up.
            self._fail(run, f"aborted by {run.aborted_by}", ABORTED)
            run.rec.aborted_by = run.aborted_by
            await self._let_settle(run.goal.name)
            await self._put_back(run)
            run.steps = []
            self._replan(run.rec, [], [], run.rec.strategy)
            await self._main(run, execute=False)
            return
        except Exception as exc:  # cannot be planned from what runs: it fails (and rolls back)
            steps, found, strategy = [], [], run.rec.strategy
            run.rec.error = f"resuming after a control-plane restart: {_one_line(exc)}"
        run.steps = steps
        self._replan(run.rec, steps, found, strategy)
        await self._main(run)

    async def _put_back(self, run: _Run) -> None:
        """Routing as if no rollout ran: no group held, nothing whole, and what serves not
        drained; unless no group then pairs a prefill with a decode (stopped mid
        keep-serving): what runs serves whole requests until the rollout ends. A process that
        does not run yet stays drained (its URL may still be listed from before): the
        supervisor undrains it once it is ready."""
        name = run.goal.name
        admin = self.admin_for(name, self.supervisor.deployments[name].ports)
        try:
            for mode in BOTH_MODES:
                await _quiet(admin.resume(mode))
            units = [u for u in self.supervisor.status(name) if u["name"] != "proxy"]
            running = {u["url"] for u in units if u["state"] == "RUNNING"}
            for url in sorted(running):
                await _quiet(admin.undrain(url))
            whole = set(whole_needed(await _safe(admin.instances(), []), running))
            for unit in units:  # never a moment with whole requests off and no pair
                await _quiet(admin.set_whole(unit["url"], unit["url"] in whole))
            run.whole |= whole  # released once the rollout (and any rollback) ends
        finally:
            await admin.aclose()

    async def _let_settle(self, name: str) -> None:
        """Until what the new supervisor adopted or brings back is up (or given up), within a
        readiness wait: routing put back before would send requests where nothing serves,
        and a plan made from a process still starting counts it wrong."""
        deadline = self.clock.now() + self.timeouts.ready_s
        while self.clock.now() < deadline and any(
            u["state"] in ON_ITS_WAY for u in self.supervisor.status(name)
        ):
            await self.clock.sleep(self.timeouts.poll_s)

    async def _main(self, run: _Run, execute: bool = True) -> None:
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

    async def _execute(self, run: _Run) -> None:
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
            on_applied=lambda: _quiet(self._expect_meanwhile(run, admin)),
        )
        rejected_before = 0
        try:
            if goal.kind != "start":
                rejected_before = await _safe(admin.rejected(), 0)
            if rec.error is not None:  # could not even be planned (a resumed rollout)
                raise RolloutRejected(rec.error)
            rec.current = "expect what runs and what will run"
            # A proxy that is down now is told again after each apply, and a proxy that
            # restarts is started with them: no reason to fail here.
            await _quiet(self._expect_meanwhile(run, admin))
            for index, step in enumerate(run.steps):
                await self._step(run, execution, index, step)
                if index + 1 == run.inline:
                    _tell(run, None)
            rec.step_index = len(run.steps)
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
            self._fail(run, _one_line(exc), FAILED)
            _tell(run, exc)
            rec.undo_left = await self._undo(run, execution)
        finally:
            _tell(run, None)
            if run.outcome is not None:
                try:
                    await self._after(run, execution, admin, rejected_before)
                except Exception as exc:  # the steps are over: it ends all the same
                    log.exception("%s: rollout %s: telling the proxy what runs", goal.name, rec.id)
                    rec.undo_left.append(f"telling the proxy what runs: {_one_line(exc)}")

    async def _undo(self, run: _Run, execution: Execution) -> list[str]:
        """Routing put back. A rollout that rolls back, or that restarted processes, keeps
        holding (its rollback holds too) and keeps whole requests served until the processes
        its rollback brings back, or those it restarted, serve (`_release`)."""
        if self._should_roll_back(run) or execution.applied:
            run.held |= set(execution.paused)
            run.whole |= set(execution.whole)
        return await execution.undo(keep=bool(run.held or run.whole))

    async def _release(self, run: _Run) -> None:
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
                    run.rec.undo_left.append(f"resume {group}: {_one_line(exc)}")
            for url in sorted(run.whole):
                try:
                    await admin.set_whole(url, False)
                except (ProxyAdminError, OSError) as exc:
                    run.rec.undo_left.append(f"whole off {url}: {_one_line(exc)}")
        finally:
            await admin.aclose()
        run.held, run.whole = set(), set()

    async def _step(self, run: _Run, execution: Execution, index: int, step: Step) -> None:
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
            state.state, state.error = "failed", _one_line(exc) or type(exc).__name__
            state.seconds = round(self.clock.now() - started, 3)
            raise
        state.state, state.seconds = "done", round(self.clock.now() - started, 3)
        rec.timings.append({"step": step.describe(), "seconds": state.seconds})

    async def _expect_meanwhile(self, run: _Run, admin: AdminCalls) -> None:
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
        self, run: _Run, execution: Execution, admin: AdminCalls, rejected_before: int
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
                await _safe(admin.expect(_unique(entries)), None)
            if goal.kind != "start":
                now = await _safe(admin.rejected(), rejected_before)
                rec.rejected = max(0, now - rejected_before)
        finally:
            await admin.aclose()

    def _should_roll_back(self, run: _Run) -> bool:
        goal = run.goal
        return (
            goal.auto_rollback
            and goal.back is not None
            and goal.kind != "rollback"
            and goal.name in self.supervisor.deployments
        )

    async def _roll_back(self, run: _Run) -> None:
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
            run.rec.error = f"{run.rec.error}; rollback could not be planned: {_one_line(exc)}"
            run.rollback_ok = False
            await self._release(run)
            return
        run.rec.state = run.outcome or FAILED  # ended: the store holds one active rollout
        self._save(run.rec)
        sub = _Run(back, self._new_record(back, steps, found, strategy), steps)
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

    def _settle(self, run: _Run) -> None:
        rec, goal = run.rec, run.goal
        rec.state, rec.ended_at = run.outcome or FAILED, self.clock.wall()
        if rec.state == DONE:
            state = RevisionState.APPLIED
        elif run.rollback_ok:
            state = RevisionState.ROLLED_BACK
        else:
            state = RevisionState.FAILED
        # A start that fails leaves its revision pending: nothing of it ran, and the next
        # start runs it again.
        if goal.settles and (rec.state == DONE or goal.kind != "start"):
            rec.revision_state = state.value
            try:
                self.log.settle_change(goal.name, rec.revision, state.value, settle_detail(rec))
            except Conflict as exc:  # settled already (a resumed rollout's revision)
                log.warning("%s: %s", goal.name, exc)
        self._save(rec)
        kind = "done" if rec.state == DONE else rec.state
        prefix = "switch" if rec.kind == "switch" else "rollout"
        self.record(rec.actor, f"{prefix}.{kind}", outcome_message(rec), goal.name, rec.to_json())

    def _unsettled_origin(self, rec: RolloutRecord) -> RolloutRecord | None:
        """The rollout `rec` rolls back, if its revision was left in progress."""
        if rec.kind != "rollback" or rec.rollback_of is None:
            return None
        origin = self.find(rec.deployment, rec.rollback_of)
        if origin is None or origin.revision_state != RevisionState.IN_PROGRESS.value:
            return None
        return origin

    def _settle_origin(self, origin: RolloutRecord, rolled_back: bool) -> None:
        """Settle the revision of a rollout whose rollback a stopped plane left to this one."""
        state = RevisionState.ROLLED_BACK if rolled_back else RevisionState.FAILED
        origin.revision_state, origin.ended_at = state.value, origin.ended_at or self.clock.wall()
        try:
            self.log.settle_change(
                origin.deployment, origin.revision, state.value, settle_detail(origin)
            )
        except Conflict as exc:  # settled meanwhile
            log.warning("%s: %s", origin.deployment, exc)
        self._save(origin)
        self.record(
            origin.actor,
            f"rollout.{origin.state}",
            outcome_message(origin),
            origin.deployment,
            origin.to_json(),
        )

    def _fail(self, run: _Run, why: str, state: str) -> None:
        rec = run.rec
        run.outcome = state
        rec.failed_step = rec.current
        rec.error = f"{rec.current}: {why}" if rec.current else why

    # -- records ---------------------------------------------------------------------------

    def _new_record(
        self, goal: Goal, steps: list[Step], found: list[Change], strategy: str
    ) -> RolloutRecord:
        back = goal.back.revision if goal.back is not None else None
        rec = RolloutRecord(
            "",
            goal.name,
            goal.switch_mode,
            strategy,
            goal.actor,
            goal.reason,
            [],
            started_at=self.clock.wall(),
            revision=goal.target.revision,
            kind=goal.kind,
            from_revision=back,
            auto_rollback=goal.auto_rollback,
            forecast=goal.forecast,
        )
        if not goal.settles:
            rec.revision_state = ""  # it settles no revision: the store says its state
        self._replan(rec, steps, found, strategy)
        rec.id = str(self.log.new_rollout(goal.name, rec.to_json()))
        return rec

    def _replan(
        self, rec: RolloutRecord, steps: list[Step], found: list[Change], strategy: str
    ) -> None:
        rec.strategy = strategy
        rec.steps = [s.describe() for s in steps]
        rec.step_states = [
            StepState(s.describe(), deadline_s=self.timeouts.deadline(s)) for s in steps
        ]
        rec.step_index = 0
        rec.deadline_at = self.clock.wall() + sum(s.deadline_s for s in rec.step_states)
        rec.changes = {a.value: [c.name for c in found if c.action is a] for a in Action}
        rec.why = {c.name: c.why for c in found if c.why}

    def _save(self, rec: RolloutRecord) -> None:
        if rec.id:
            self.log.save_rollout(int(rec.id), rec.to_json())

    def _emit_begin(self, run: _Run) -> None:
        rec = run.rec
        changing = ", ".join(
            f"{action} {' '.join(names)}"
            for action, names in rec.changes.items()
            if names and action != "keep"
        )
        self.record(
            rec.actor,
            "switch.begin" if rec.kind == "switch" else "rollout.begin",
            f"{rec.deployment}: {rec.describe()} toward revision {rec.revision}: "
            f"{changing or 'nothing to change'}" + (f" ({rec.reason})" if rec.reason else ""),
            rec.deployment,
            {"rollout": rec.id, "revision": rec.revision, "switch": rec.id},
        )

    def _end_orphan(self, rec: RolloutRecord, why: str) -> None:
        rec.state, rec.error, rec.ended_at = FAILED, why, self.clock.wall()
        if rec.revision_state == RevisionState.IN_PROGRESS.value:
            rec.revision_state = RevisionState.FAILED.value
            try:
                self.log.settle_change(rec.deployment, rec.revision, "failed", why)
            except Exception as exc:  # the deployment is gone: nothing to settle
                log.warning("%s: %s", rec.deployment, exc)
        self._save(rec)
        self.record(ACTOR, "rollout.failed", f"{rec.deployment}: {why}", rec.deployment, None)

    def _back_of(self, rec: RolloutRecord) -> Target | None:
        if rec.from_revision is None:
            return None
        try:
            return self.load(rec.deployment, rec.from_revision)
        except Exception:  # gone or unreadable: a failure cannot roll back to it
            return None

    def _token(self, name: str) -> str | None:
        try:
            return self.supervisor.admin_token(name)
        except Exception:
            return None

    def _http_admin(self, name: str, ports: AllocatedPorts) -> AdminCalls:
        def url() -> str:  # at each call: a start's proxy is placed by its first step
            return self.supervisor.proxy_url(name) or f"http://127.0.0.1:{ports.proxy}"

        return ProxyAdminClient(url, lambda: self._token(name))


def _tell(run: _Run, raised: BaseException | None) -> None:
    """The caller waiting for the inline steps learns how they went (once)."""
    if run.inline_done is not None and not run.inline_done.done():
        run.inline_done.set_result(raised)


def busy_message(rec: RolloutRecord, verb: str = "change") -> str:
    return (
        f"{rec.deployment!r} cannot {verb} now: {rec.describe()} holds it; watch it with "
        f"`pdctl rollout status {rec.deployment}`, end it with "
        f"`pdctl rollout abort {rec.deployment}`"
    )


def _resumable(strategy: str) -> str | None:
    return strategy if strategy in strategies.STRATEGIES and strategy != "keep-serving" else None


def _unique(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_url: dict[str, dict[str, Any]] = {}
    for entry in entries:
        seen = by_url.get(entry["url"])
        if seen is None:
            by_url[entry["url"]] = dict(entry)
        else:
            seen["modes"] = sorted({*seen["modes"], *entry["modes"]})
    return list(by_url.values())


def _one_line(exc: BaseException) -> str:
    """Why, in one line: the message of an error pdctl raises, else its type and message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    known = isinstance(exc, PdctlError | TimeoutError | ProxyAdminError)
    if known and text:
        return text[:400]
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:400]


async def _safe(call: Awaitable[Any], default: Any) -> Any:
    try:
        return await call
    except (ProxyAdminError, OSError):
        return default


async def _quiet(call: Awaitable[Any]) -> None:
    await _safe(call, None)
