"""The rollout engine's state and its record keeping: each rollout's record written to the
store at every step, its begin and end told as events, its revision settled once it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from controller.clients.proxy_admin import ProxyAdminClient
from controller.launch.ports import AllocatedPorts
from controller.rollout.changes import Action, Change
from controller.rollout.goal import (
    Goal,
    RolloutBusy,
    RolloutLog,
    Run,
    Target,
    TargetLoader,
    busy_message,
)
from controller.rollout.record import (
    DONE,
    FAILED,
    RolloutRecord,
    StepState,
    outcome_message,
    settle_detail,
)
from controller.supervise.clock import Clock, SystemClock
from controller.supervise.supervisor import Supervisor
from controller.switch.plan import Step
from controller.switch.steps import AdminCalls, Timeouts
from domain.errors import Conflict
from state.changes import RevisionState

log = logging.getLogger("pdctl.rollout")

Recorder = Callable[[str, str, str, str | None, dict | None], object]  # Store.record
AdminFactory = Callable[[str, AllocatedPorts], AdminCalls]


class Ledger:
    """What every part of the engine shares: the supervisor, the store, the clock, the
    proxy's admin API, and the rollouts running now."""

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
        self._active: dict[str, Run] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its rollouts run on

    def _runs_here(self) -> None:
        """Rollouts run on the loop that began the first one; remember it."""
        with contextlib.suppress(RuntimeError):  # none runs: nothing to read it against
            self._loop = asyncio.get_running_loop()

    def _read_on_loop(self) -> None:
        """The engine changes its state across several statements (a rollout ends, then its
        revision settles; an aborted rollout ends, then its rollback begins). Read from the
        loop it runs on, a reader sees it between those steps; read from a worker thread (a
        sync route), it saw an aborted rollout ended before its rollback began. So it is read
        only on that loop: an async route."""
        if self._loop is None:
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is not self._loop:
            raise RuntimeError(
                "the rollout engine is read on its event loop (an async route), "
                "never from a worker thread"
            )

    # -- queries ---------------------------------------------------------------------------

    def active(self, name: str) -> RolloutRecord | None:
        self._read_on_loop()
        run = self._active.get(name)
        return run.rec if run is not None else None

    def refuse_if_running(self, name: str, verb: str = "change") -> None:
        rec = self.active(name)
        if rec is not None:
            raise RolloutBusy(busy_message(rec, verb))

    def history(self, name: str, limit: int = 50) -> list[RolloutRecord]:
        """Newest first, from the store (so they outlive the control plane); the live one as
        this engine sees it."""
        live = self.active(name)  # read on the loop (checked there)
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

    def _settle(self, run: Run) -> None:
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

    def _fail(self, run: Run, why: str, state: str) -> None:
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

    def _emit_begin(self, run: Run) -> None:
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
