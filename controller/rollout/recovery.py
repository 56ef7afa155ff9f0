"""Taking over after a restart of `pdctl serve`: each rollout the stopped control plane left
running goes on toward the same revision once routing is put back; one left without an end
ends now.
"""

from __future__ import annotations

import asyncio
import logging

from controller.rollout import strategies
from controller.rollout.calls import one_line, quiet, safe
from controller.rollout.goal import ACTOR, Goal, Run
from controller.rollout.record import ABORTED, FAILED, RolloutRecord
from controller.rollout.routing import whole_needed
from controller.rollout.runner import BOTH_MODES, Runner
from controller.switch.steps import AdminCalls
from state.changes import RevisionState

log = logging.getLogger("pdctl.rollout")
ROUTED = ("prefill", "decode")  # the roles a rollout tells the proxy of, and a role move
STOPPED_MID_ROLLOUT = "the control plane stopped during this rollout"
TAKING_OVER = "taking over: waiting for what starts, then routing put back"


class Recovery(Runner):
    """Takes over what a stopped control plane left running (`recover`)."""

    def recover(self) -> list[RolloutRecord]:
        """Take over each rollout a stopped control plane left running: routing put back,
        then on toward the same revision (a rollback toward the revision it rolls back to)."""
        self._runs_here()
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
            run = Run(goal, rec, [], rolls_back=self._unsettled_origin(rec))
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

    async def _resume(self, run: Run) -> None:
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
            run.rec.error = f"resuming after a control-plane restart: {one_line(exc)}"
        run.steps = steps
        # Where each planned process serves, kept for the steps that name one after it is
        # gone (a forget after the stop its batch made), as a rollout begun here keeps them.
        run.urls = {**run.urls, **{c.name: c.url for c in found if c.url}}
        self._replan(run.rec, steps, found, strategy)
        await self._main(run)

    async def _put_back(self, run: Run) -> None:
        """Routing as if no rollout ran: no group held, nothing whole, and what serves not
        drained; unless no group then pairs a prefill with a decode (stopped mid
        keep-serving): what runs serves whole requests until the rollout ends. A process that
        does not run yet stays drained (its URL may still be listed from before): the
        supervisor undrains it once it is ready."""
        name = run.goal.name
        admin = self.admin_for(name, self.supervisor.deployments[name].ports)
        try:
            for mode in BOTH_MODES:
                await quiet(admin.resume(mode))
            units = [u for u in self.supervisor.status(name) if u["name"] != "proxy"]
            running = {u["url"] for u in units if u["state"] == "RUNNING"}
            await self._relist(name, admin, units)
            for url in sorted(running):
                await quiet(admin.undrain(url))
            whole = set(whole_needed(await safe(admin.instances(), []), running))
            for unit in units:  # never a moment with whole requests off and no pair
                await quiet(admin.set_whole(unit["url"], unit["url"] in whole))
            run.whole |= whole  # released once the rollout (and any rollback) ends
        finally:
            await admin.aclose()

    async def _relist(self, name: str, admin: AdminCalls, units: list[dict]) -> None:
        """The proxy lists each prefill and decode the controller tells it of as the role it
        serves, and none that is gone: the stopped plane may have died between starting an
        instance and telling the proxy (planned from what runs, the takeover keeps it and
        never tells it), or between stopping one and the proxy forgetting it."""
        dep = self.supervisor.deployments[name]
        ours = [
            u
            for u in units
            if u["role"] in ROUTED
            and u["name"] in dep.units
            and not dep.units[u["name"]].launch.registers
        ]
        if not ours:
            return  # MoRIIO's register themselves
        listed = {e["url"]: e.get("role") for e in await safe(admin.instances(), []) if "url" in e}
        for unit in ours:
            url, role = unit["url"], unit["role"]
            if unit["state"] == "RUNNING" and not unit["dropping"] and listed.get(url) != role:
                await quiet(admin.add(url, role))
                self.supervisor.proxy_told(name, url, role)
        known = {u["url"] for u in units}
        for url, role in listed.items():
            if role in ROUTED and url not in known:
                await quiet(admin.remove(url))
                self.supervisor.proxy_told(name, url, None)

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


def _resumable(strategy: str) -> str | None:
    return strategy if strategy in strategies.STRATEGIES and strategy != "keep-serving" else None
