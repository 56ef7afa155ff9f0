"""Run a read/write switch: desired state first, then reality. The target revision is written,
marked in progress, before any instance restarts; then the steps of controller/switch/plan.py
run (controller/switch/steps.py performs them) and the revision is settled as applied, failed
or rolled back. The record an operator watches says which step failed, if one did.

One switch per deployment at a time; lifecycle calls wait their turn (409 while a switch
runs). A failed step leaves routing as good as it can (paused groups resumed, drains and
whole-request flags undone); cancelling a switch (the control plane stopping) undoes the same.
A switch a killed control plane left in progress is found by its revision when the next one
starts (`recover`): routing put back, the switch finished from what runs, then settled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from controller.clients.proxy_admin import ProxyAdminClient, ProxyAdminError
from controller.launch.placement import Addresses
from controller.launch.ports import AllocatedPorts
from controller.launch.registry_expect import expected_registrations
from controller.spec.deployment import DeploymentSpec, Mode
from controller.supervise.clock import Clock, SystemClock
from controller.supervise.supervisor import Supervisor, SupervisorError
from controller.switch.plan import (
    Step,
    SwitchRejected,
    modes,
    plan,
    recovery,
    target_spec,
    with_modes,
)
from controller.switch.record import SwitchRecord, outcome_message, record_id, settle_detail
from controller.switch.steps import AdminCalls, Execution, Timeouts
from domain.errors import InvalidTransition
from domain.modes import TRANSFER_MODES
from state.changes import RevisionState

BOTH_MODES = tuple(m.value for m in TRANSFER_MODES)
ACTOR = "controller"  # who recovers a switch a stopped control plane left in progress
STOPPED_MID_SWITCH = "the control plane stopped during this switch; routing put back"

Recorder = Callable[[str, str, str, str | None, dict | None], object]  # Store.record
AdminFactory = Callable[[str, AllocatedPorts], AdminCalls]


class SwitchBusy(SwitchRejected, InvalidTransition):
    """Another switch, or an instance that is not healthy, stands in the way."""


class SwitchRevisions(Protocol):
    """Where the target revision is written before the switch and settled after it."""

    def begin(self, name: str, spec: DeploymentSpec, actor: str, reason: str) -> int: ...

    def settle(
        self, name: str, revision: int, state: RevisionState, detail: str | None
    ) -> None: ...


class ChangeStore(Protocol):
    """The store's side of a change (state/changes.py)."""

    def deployments(self) -> list[Any]: ...

    def begin_change(
        self, name: str, spec: DeploymentSpec, actor: str, reason: str | None, kind: str = ...
    ) -> int: ...

    def settle_change(
        self, name: str, revision: int, state: str, detail: str | None = None
    ) -> None: ...


class StoreRevisions:
    """SwitchRevisions on the store (state/store.py): a revision of kind "switch"."""

    def __init__(self, store: ChangeStore) -> None:
        self.store = store

    def begin(self, name: str, spec: DeploymentSpec, actor: str, reason: str) -> int:
        return self.store.begin_change(name, spec, actor, reason, kind="switch")

    def settle(self, name: str, revision: int, state: RevisionState, detail: str | None) -> None:
        self.store.settle_change(name, revision, state.value, detail)


@dataclass
class _Switch:
    """One run: its record, the spec it starts from, the one it ends at, and where it settles."""

    rec: SwitchRecord
    spec: DeploymentSpec
    target: DeploymentSpec
    ports: AllocatedPorts
    steps: list[Step]
    revisions: SwitchRevisions
    reached: bool = True  # False: the steps cannot reach the target (settles failed)
    outcome: str = "failed"  # "done" once every step ran; the record says so once settled


class SwitchRunner:
    def __init__(
        self,
        supervisor: Supervisor,
        record: Recorder,
        clock: Clock | None = None,
        admin_for: AdminFactory | None = None,
        timeouts: Timeouts | None = None,
    ) -> None:
        self.supervisor, self.record = supervisor, record
        self.clock = clock or SystemClock()
        self.admin_for = admin_for or self._http_admin
        self.timeouts = timeouts or Timeouts()
        self.records: dict[tuple[str, str], SwitchRecord] = {}
        self._running: dict[str, asyncio.Task] = {}

    def refuse_if_running(self, name: str) -> None:
        if name in self._running:
            raise SwitchBusy(f"a mode switch of {name!r} is in progress; wait for it to end")

    def history(self, name: str) -> list[SwitchRecord]:
        return [r for r in self.records.values() if r.deployment == name]

    def find(self, name: str, switch_id: str) -> SwitchRecord | None:
        return self.records.get((name, switch_id))

    def begin(
        self,
        name: str,
        spec: DeploymentSpec,
        ports: AllocatedPorts,
        target: str,
        strategy: str,
        actor: str,
        reason: str | None,
        revisions: SwitchRevisions,
    ) -> SwitchRecord:
        """Check, write the target revision (in progress), then run the steps in the
        background; the record shows the progress."""
        self.refuse_if_running(name)
        steps = plan(spec, target, strategy)
        units = self.supervisor.status(name) if name in self.supervisor.deployments else []
        if not units:
            raise SwitchBusy(f"{name!r} is not running: start it, or edit its mode instead")
        unwell = [f"{u['name']} is {u['state']}" for u in units if u["state"] != "RUNNING"]
        if unwell:
            raise SwitchBusy("every instance must be RUNNING before a switch: " + ", ".join(unwell))
        why = f"mode switch to {target} ({strategy})" + (f": {reason}" if reason else "")
        goal = target_spec(spec, steps)
        revision = revisions.begin(name, goal, actor, why)
        rec = self._new_record(name, revision, target, strategy, actor, reason, steps)
        self.record(
            actor,
            "switch.begin",
            f"{name}: switch to {target} mode by {strategy} (revision {revision}, in progress)"
            + (f" ({reason})" if reason else ""),
            name,
            {"switch": rec.id, "revision": revision},
        )
        self._launch(_Switch(rec, spec, goal, ports, steps, revisions))
        return rec

    def recover(
        self,
        name: str,
        revision: int,
        target: DeploymentSpec,
        revisions: SwitchRevisions,
        strategy: str | None = None,
    ) -> SwitchRecord | None:
        """A switch a stopped control plane left in progress: routing put back, then (if what
        runs is not the target yet) the switch again from what runs, by `strategy`; settled
        by how that ends. None if `name` is not supervised here: then it is settled failed."""
        running = self.supervisor.deployments.get(name)
        if running is None:
            revisions.settle(name, revision, RevisionState.FAILED, STOPPED_MID_SWITCH)
            return None
        goal = ",".join(sorted(set(modes(target).values())))
        rec = self._new_record(name, revision, goal, "recover", ACTOR, STOPPED_MID_SWITCH, [])
        self.record(ACTOR, "switch.recover", f"{name}: {STOPPED_MID_SWITCH}", name, rec.to_json())
        switch = _Switch(rec, running.spec, target, running.ports, [], revisions)
        self._running[name] = asyncio.create_task(
            self._recover(switch, strategy), name=f"switch-{name}"
        )
        return rec

    async def _recover(self, switch: _Switch, strategy: str | None) -> None:
        actual = await self._as_routed(switch)
        try:
            switch.steps = recovery(actual, switch.target, strategy)
        except SwitchRejected as exc:  # put routing back all the same, then settle failed
            switch.steps = recovery(actual, actual, None)
            switch.reached, switch.rec.error = False, str(exc)
        switch.rec.steps = [s.describe() for s in switch.steps]
        await self._run(switch)

    async def _as_routed(self, switch: _Switch) -> DeploymentSpec:
        """The running spec with each group in the mode the proxy routes its instances in
        (adopted instances may still run the mode from before the switch)."""
        admin = self.admin_for(switch.rec.deployment, switch.ports)
        try:
            listing = {e["url"]: e.get("group") for e in await admin.instances()}
        except ProxyAdminError:
            return switch.spec
        finally:
            await admin.aclose()
        by_group: dict[str, set] = {}
        for unit in self.supervisor.status(switch.rec.deployment):
            by_group.setdefault(unit.get("group", ""), set()).add(listing.get(unit["url"]))
        actual = switch.spec
        for group, seen in by_group.items():
            if len(seen) == 1 and (mode := next(iter(seen))) in BOTH_MODES:
                actual = with_modes(actual, {group}, Mode(mode))
        return actual

    async def wait(self, name: str, switch_id: str) -> SwitchRecord | None:
        task = self._running.get(name)
        if task is not None:
            await asyncio.shield(task)
        return self.find(name, switch_id)

    async def close(self) -> None:
        for task in self._running.values():
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)

    def _new_record(
        self,
        name: str,
        revision: int,
        target: str,
        strategy: str,
        actor: str,
        reason: str | None,
        steps: list[Step],
    ) -> SwitchRecord:
        rec = SwitchRecord(
            record_id(revision),
            name,
            target,
            strategy,
            actor,
            reason,
            [s.describe() for s in steps],
            revision=revision,
            started_at=self.clock.wall(),
        )
        self.records[(name, rec.id)] = rec
        return rec

    def _launch(self, switch: _Switch) -> None:
        name = switch.rec.deployment
        self._running[name] = asyncio.create_task(self._run(switch), name=f"switch-{name}")

    async def _run(self, switch: _Switch) -> None:
        rec = switch.rec
        admin = self.admin_for(rec.deployment, switch.ports)
        run = Execution(self.supervisor, admin, self.clock, rec.deployment, self.timeouts)
        rejected_before = await _safe(admin.rejected(), 0)
        host = self.supervisor.engine_addresses(rec.deployment)
        try:
            # Restarted instances register in the new mode: the proxy must expect that first.
            rec.current = "expect both modes"
            both = expected_registrations(switch.spec, switch.ports, host, also_modes=BOTH_MODES)
            await admin.expect(both)
            for step in switch.steps:
                rec.current = step.describe()
                started = self.clock.now()
                await run.do(step)
                rec.timings.append(
                    {"step": step.describe(), "seconds": round(self.clock.now() - started, 3)}
                )
            switch.outcome = "done"
        except asyncio.CancelledError:
            await self._failed(rec, run, "cancelled (the control plane is stopping)")
            raise
        except (SwitchRejected, SupervisorError, TimeoutError, ProxyAdminError, OSError) as exc:
            await self._failed(rec, run, str(exc))
        finally:
            try:
                await self._settle(switch, run, admin, host, rejected_before)
            finally:
                self._running.pop(rec.deployment, None)

    async def _failed(self, rec: SwitchRecord, run: Execution, why: str) -> None:
        rec.failed_step = rec.current
        rec.error = f"{rec.current}: {why}"
        rec.undo_left = await run.undo()

    async def _settle(
        self,
        switch: _Switch,
        run: Execution,
        admin: AdminCalls,
        host: Addresses,
        rejected_before: int,
    ) -> None:
        # The record says "running" until all of it is settled: a reader that sees it done or
        # failed sees its end, timings and revision state too (the CLI printed "done in 0.0 s
        # (revision 2 in progress)" when it read the record between the two).
        rec = switch.rec
        running = self.supervisor.deployments.get(rec.deployment)
        final = running.spec if running is not None else switch.spec
        # Back to exactly what runs now (done: the new mode; failed: whatever did start).
        await _safe(admin.expect(expected_registrations(final, switch.ports, host)), None)
        rec.ended_at = self.clock.wall()
        rec.current = None
        rec.held_s, rec.degraded_s = run.held_s, run.degraded_s
        rec.rejected = max(0, await _safe(admin.rejected(), rejected_before) - rejected_before)
        await admin.aclose()
        done = switch.outcome == "done"
        if done and switch.reached and modes(final) == modes(switch.target):
            state = RevisionState.APPLIED
        elif not done and not run.applied and not rec.undo_left:
            state = RevisionState.ROLLED_BACK  # nothing restarted, routing put back
        else:
            state, done = RevisionState.FAILED, False
            rec.error = rec.error or f"what runs is not the target: {modes(final)}"
        rec.revision_state = state.value
        rec.state = "done" if done else "failed"
        switch.revisions.settle(rec.deployment, rec.revision, state, settle_detail(rec))
        kind = "switch.done" if rec.state == "done" else "switch.failed"
        self.record(rec.actor, kind, outcome_message(rec), rec.deployment, rec.to_json())

    def _token(self, name: str) -> str | None:
        try:
            return self.supervisor.admin_token(name)
        except SupervisorError:
            return None

    def _http_admin(self, name: str, ports: AllocatedPorts) -> AdminCalls:
        url = self.supervisor.proxy_url(name) or f"http://127.0.0.1:{ports.proxy}"
        return ProxyAdminClient(url, lambda: self._token(name))


async def _safe(call: Any, default: Any) -> Any:
    try:
        return await call
    except ProxyAdminError:
        return default
