"""The P:D ratio autopilot's shell: once a second, for each running deployment whose spec
opted in (`autopilot`, controller/spec/sections/autopilot.py), read the observer's 10 s frame, keep
the window's samples, ask the pure decision (controller/autopilot/decide.py) and act on it: a move
through the role-move machinery (a revision, 0 lost), or in dry-run only an event. Each
decision that moves, would move, or is held by a guard rail is an event with its numbers
(`autopilot.move`, `autopilot.dry_run`, `autopilot.held`, `autopilot.move_failed`); a held
one is written once per rail, not every second. The settings are the current revision's, so
an autopilot is turned on, off or to dry-run by a new revision, without a restart.
`status(name)` is what the API shows.

It lives on the web floor because it joins the observer's frames and the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controller import (
    HOUR_S,
    IN_PROGRESS,
    Decision,
    capacity_of,
    decide,
    instance_roles,
    instance_slots,
    sample,
)
from domain.errors import PdctlError
from services.calibrations import kept_calibration

if TYPE_CHECKING:
    from controller import ControlService

log = logging.getLogger("pdctl.autopilot")
ACTOR = "autopilot"
WINDOW = "10s"  # each sample: the shortest window, so the decision's window is its own
BUSY_STATES = ("STARTING", "BACKOFF", "STOPPING")


@dataclass
class Pilot:
    """One deployment's autopilot memory: samples, moves (dry-run too), the last decision."""

    samples: deque = field(default_factory=lambda: deque(maxlen=4000))
    moves: list[float] = field(default_factory=list)
    last: Decision | None = None
    last_ts: float | None = None
    last_move: dict[str, Any] | None = None
    held_key: str | None = None
    moving: asyncio.Task | None = None
    settings: Any = None  # the current revision's autopilot, as last read
    # The capacity model of the running spec (controller/autopilot/capacity.py), and why none
    capacity: Any = None
    capacity_note: str = ""
    capacity_spec: Any = None
    capacity_calibration: Any = None  # when the deployment's calibration was kept, if any
    slots: dict[str, int] = field(default_factory=dict)  # each instance's max_num_seqs


class AutopilotLoop:
    def __init__(
        self,
        controller: ControlService,
        observer: Any,
        store: Any,
        interval: float = 1.0,
        calibrations: Any = None,
    ):
        self.controller, self.observer, self.store = controller, observer, store
        # state/calibration_store.py: a deployment's measured timing, when it has one
        self.calibrations = calibrations
        self.interval = interval
        self.pilots: dict[str, Pilot] = {}
        self._task: asyncio.Task | None = None
        if observer is not None and hasattr(observer, "sections"):
            observer.sections["autopilot"] = self.section  # the live frames carry it

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="pdctl-autopilot")

    async def close(self) -> None:
        tasks = [p.moving for p in self.pilots.values() if p.moving is not None]
        for task in [self._task, *tasks]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except PdctlError as err:  # a deployment gone under us: next tick
                log.warning("autopilot tick: %s", err)
            await asyncio.sleep(self.interval)

    async def tick(self) -> None:
        """Each running deployment whose current revision (the desired state: turning it on,
        off or to dry-run needs no restart) has an enabled autopilot takes one step."""
        deployments = self.controller.supervisor.deployments
        for name in set(self.pilots) - set(deployments):
            del self.pilots[name]
        for name, dep in list(deployments.items()):
            if not dep.running:  # stopped: nothing to steer, and its spec is not read each second
                self.pilots.pop(name, None)
                continue
            current = await asyncio.to_thread(self._current, name)
            ap = current.spec.autopilot if current is not None else None
            if ap is None or not ap.enabled:
                self.pilots.pop(name, None)
                continue
            await self._step(name, dep, ap, current)

    def _current(self, name: str) -> Any:
        try:
            return self.store.get(name)
        except PdctlError:  # not stored (gone), or unreadable by today's rules
            return None

    async def _step(self, name: str, dep: Any, ap: Any, current: Any) -> None:
        frame = (self.observer.latest.get(name) or {}).get(WINDOW)
        pilot = self.pilots.setdefault(name, Pilot())
        pilot.settings = ap
        if frame is None or frame["ts"] == pilot.last_ts:
            return
        now = pilot.last_ts = frame["ts"]
        kept = kept_calibration(self.calibrations, name)
        # a new revision runs (its shapes), or a new calibration was kept (its timing)
        if pilot.capacity_spec is not dep.spec or pilot.capacity_calibration != kept.at:
            pilot.capacity_spec, pilot.capacity_calibration = dep.spec, kept.at
            pilot.capacity, pilot.capacity_note = capacity_of(dep.spec, kept.profile)
            pilot.slots = instance_slots(dep.spec)
        pilot.samples.append(sample(frame, now, pilot.slots))
        while pilot.samples and pilot.samples[0].ts < now - ap.window_s - 10:
            pilot.samples.popleft()
        pilot.moves = [t for t in pilot.moves if now - t < HOUR_S]
        load = {r["name"]: r.get("running") or 0 for r in frame.get("instances") or []}
        busy = self._busy(name, pilot, current)
        roles = instance_roles(dep.spec)
        d = decide(ap, list(pilot.samples), roles, pilot.moves, now, busy, load, pilot.capacity)
        pilot.last = d
        if d.kind == "none":
            pilot.held_key = None
        elif d.kind == "held":
            key = f"{d.bound}:{d.why.split('held: ', 1)[-1].split(':', 1)[0]}"
            if key != pilot.held_key:
                pilot.held_key = key
                await self._record("autopilot.held", f"{name}: {d.why}", name, d, None)
        else:
            pilot.moves.append(now)
            pilot.samples.clear()  # what comes after the move is a new window
            pilot.held_key = None
            if ap.dry_run:
                facts = {"ts": now, "instance": d.instance, "dry_run": True}
                pilot.last_move = {**facts, "from": d.source, "to": d.target, "why": d.why}
                what = f"{name}: would move {d.instance} {d.source} -> {d.target} ({d.why})"
                await self._record("autopilot.dry_run", what, name, d, facts)
            else:
                pilot.moving = asyncio.create_task(self._move(name, pilot, d, now, ap))

    def _busy(self, name: str, pilot: Pilot, current: Any) -> str | None:
        """Why a change is under way now, or None."""
        if pilot.moving is not None and not pilot.moving.done():
            return "an autopilot move is under way"
        if self.controller.steering.role_moves.busy(name):
            return "a role move is under way"
        active = self.controller.rollouts.active(name)
        if active is not None:
            return f"{active.describe()} is under way"
        states = {u["name"]: u["state"] for u in self.controller.status(name)}
        restarting = sorted(n for n, s in states.items() if s in BUSY_STATES)
        if restarting:
            return f"not every process is running ({', '.join(restarting)})"
        if current.state == IN_PROGRESS:
            return f"revision {current.revision} is in progress"
        return None

    async def _move(self, name: str, pilot: Pilot, d: Decision, now: float, ap: Any) -> None:
        what = f"{name}: move {d.instance} {d.source} -> {d.target}"
        # decide() names both on every move (controller/autopilot/decide.py)
        assert d.instance is not None and d.target is not None, d
        try:
            current = await asyncio.to_thread(self.store.get, name)
            moved = await self.controller.move_role(
                name,
                current.spec,
                d.instance,
                d.target,
                store=self.store,
                actor=ACTOR,
                reason=f"autopilot: {d.why}",
                drain_timeout_s=ap.drain_timeout_s,
            )
        except PdctlError as err:
            self._settled(pilot)
            await self._record("autopilot.move_failed", f"{what} failed: {err}", name, d, None)
            return
        self._settled(pilot)
        seconds = moved.get("seconds")
        facts = {
            "ts": now,
            "instance": d.instance,
            "revision": moved["revision"],
            "seconds": seconds,
        }
        pilot.last_move = {**facts, "from": d.source, "to": d.target, "why": d.why}
        message = f"{what} ({d.why}; revision {moved['revision']})"
        await self._record("autopilot.move", message, name, d, facts)

    def _settled(self, pilot: Pilot) -> None:
        """A move ended: what was sampled while it ran is not a window after it, and the
        cooldown counts from now (a failed move too: no retry at once)."""
        pilot.samples.clear()
        if pilot.moves:
            pilot.moves[-1] = max(pilot.moves[-1], pilot.last_ts or 0.0)  # the frames' clock

    async def _record(self, kind, message, name, d: Decision, facts) -> None:
        detail = {**d.to_json(), **(facts or {})}
        await asyncio.to_thread(self.store.record, ACTOR, kind, message, name, detail)

    def status(self, name: str, spec: Any) -> dict[str, Any]:
        """The autopilot as the API and `pdctl show` give it."""
        return _status(spec.autopilot, self.pilots.get(name))

    def section(self, name: str) -> dict[str, Any] | None:
        """The frame's `autopilot` (observe/scrape/observer.py sections): what `status` says, its
        one line, no settings; None while no enabled autopilot steers the deployment."""
        pilot = self.pilots.get(name)
        if pilot is None or pilot.settings is None:
            return None
        out = _status(pilot.settings, pilot)
        del out["settings"]
        return {**out, "line": status_line(out)}


def _status(ap: Any, pilot: Pilot | None) -> dict[str, Any]:
    mode = "off" if ap is None or not ap.enabled else "dry-run" if ap.dry_run else "on"
    return {
        "mode": mode,
        "settings": ap.model_dump() if ap is not None else None,
        "last_decision": pilot.last.to_json() if pilot and pilot.last else None,
        "decided_at": pilot.last_ts if pilot else None,
        "last_move": pilot.last_move if pilot else None,
        "moves_last_hour": len(pilot.moves) if pilot else 0,
        # what leads the decision besides the backlog: the arrivals against this model
        "capacity": (pilot.capacity.source if pilot.capacity else pilot.capacity_note)
        if pilot
        else None,
    }


def status_line(status: dict[str, Any]) -> str:
    """ "autopilot: on, last move decode-1 decode -> prefill, revision 3: TTFT-bound ..." """
    move, last = status.get("last_move"), status.get("last_decision") or {}
    head = f"autopilot: {status['mode']}"
    if move is None:
        return head + (f", no move yet ({last['why']})" if last.get("why") else "")
    verb = "would move" if move.get("dry_run") else "last move"
    rev = f", revision {move['revision']}" if move.get("revision") else ""
    return f"{head}, {verb} {move['instance']} {move['from']} -> {move['to']}{rev}: {move['why']}"
