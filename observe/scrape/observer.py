"""The observe shell: every `interval` seconds, scrape the proxy and each instance of every
deployment the controller runs, build one frame per window, publish them to the hub, store a
point of history every `history_step_s`. Events are not relayed here: the store publishes
each one to the hub as it is written (state/store/).

One long-lived aiohttp session with short timeouts; a target that does not answer is
`up: false` in the frame and never delays or breaks the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from observe.attached.ttft import engine_ttft_parts
from observe.attached.watch import (
    attached_units,
    canary_units,
    engine_latency,
    health_transition,
    roles,
)
from observe.build import (
    DeploymentInfo,
    TargetState,
    build_frame,
    marked_point,
    with_windows,
)
from observe.canary.runner import CanaryRunner
from observe.canary.state import Transition as CanaryTransition
from observe.discovery.follower import Discoverer
from observe.frames import WINDOW_SECONDS, WINDOWS, ChangeMark, Frame
from observe.scrape.settings import AttachedView, ObserveSettings, kv_bytes_per_token
from observe.scrape.targets import ScrapeTarget, fetch_metrics
from observe.scrape.topics import DEFAULT_WINDOW, frame_topic
from observe.sections.evidence import judge, marks, real_requests
from observe.sections.pd_check import (
    CHECK_WINDOW,
    DecodeState,
    Transition,
    check,
    pause_reason,
)
from observe.sections.serving import serving_section
from state.history import History
from state.hub import Hub, encode

log = logging.getLogger("pdctl.observe")

SCRAPED_STATES = ("RUNNING", "STARTING", "STOPPING")
PRUNE_EVERY_S = 60.0
MARKS_WITHIN_S = max(WINDOW_SECONDS.values()) + 30.0  # the longest window and its settling


class Observer:
    def __init__(
        self,
        controller: Any,
        store: Any,
        hub: Hub,
        settings: ObserveSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.controller, self.hub, self.store = controller, hub, store
        self.settings = settings or ObserveSettings()
        self.history = History(store.engine)
        self.clock = clock
        self.latest: dict[str, dict[str, Frame]] = {}  # deployment -> window -> frame
        self.ticks = 0
        self._targets: dict[tuple[str, str, str], ScrapeTarget] = {}
        # "Is PD happening?": each deployment's decode states, and events not yet written
        self.pd_states: dict[str, dict[str, DecodeState]] = {}
        self._pd_events: list[tuple[str, Transition]] = []
        self.canary = CanaryRunner(clock)  # the correctness canary (observe/canary/state.py)
        # Sections a layer above adds to every frame: key -> f(deployment) -> dict or None
        # (services/autopilot_loop.py's "autopilot"), so the live frames carry them too.
        self.sections: dict[str, Callable[[str], dict[str, Any] | None]] = {}
        self.attached: dict[str, Any] = {}  # attached deployments' specs, read each tick
        self.discovery = Discoverer(self.settings.attach_hosts)  # their discovered groups
        self._health_events: list[tuple[str, Any]] = []
        self._last_point: dict[str, float] = {}
        self._last_prune = 0.0
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task | None = None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout)
        self._session = aiohttp.ClientSession(
            timeout=timeout, connector=aiohttp.TCPConnector(limit=64, force_close=False)
        )
        self._task = asyncio.create_task(self._loop(), name="pdctl-observer")

    async def close(self) -> None:
        await self.canary.close()
        await self.discovery.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _loop(self) -> None:
        interval = self.settings.interval
        next_at = time.monotonic()
        while True:
            try:
                await self.tick()
            except (aiohttp.ClientError, OSError, ValueError) as err:  # never stop observing
                log.warning("observe tick failed: %s", err)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (a slow tick): start afresh rather than burst
                next_at, delay = time.monotonic(), 0.0
            await asyncio.sleep(delay)

    # -- one tick -------------------------------------------------------------------------

    async def tick(self) -> None:
        now = self.clock()
        self.attached = await asyncio.to_thread(self._attached_specs)
        names = list(self.controller.supervisor.deployments)
        if self._session is not None:
            for name, spec in self.attached.items():
                if name not in names:  # a look at each due source, in tasks of their own
                    self.discovery.tick(name, spec, now, self._session)
        self.discovery.forget({n for n in self.attached if n not in names})
        names += [n for n in self.attached if n not in names]
        # Discovery's changes so far, taken before the frames are built: each is recorded
        # only once a frame (and so the status rows) shows the set it tells of; those that
        # come while the frames are built wait for the next tick.
        discovered, self.discovery.events = self.discovery.events, []
        await asyncio.gather(*(self._observe(name, now) for name in names))
        for gone in set(self.latest) - set(names):
            del self.latest[gone]
        self._targets = {k: v for k, v in self._targets.items() if k[0] in names}
        self.pd_states = {k: v for k, v in self.pd_states.items() if k in names}
        self.canary.forget(set(names))
        events, self._pd_events = self._pd_events + self.canary.events + self._health_events, []
        events += discovered
        self._health_events = []
        self.canary.events = []
        points = [
            (n, now, marked_point(f[WINDOWS[0]]))
            for n, f in self.latest.items()
            if now - self._last_point.get(n, 0.0) >= self.settings.history_step_s
        ]
        for name, _, _ in points:
            self._last_point[name] = now
        prune = now - self._last_prune >= PRUNE_EVERY_S
        if prune:
            self._last_prune = now
        await asyncio.to_thread(
            self._housekeeping, points, now - self.settings.retention_s if prune else None, events
        )
        self.ticks += 1

    def _attached_specs(self) -> dict[str, Any]:
        """Every attached deployment's current spec (controller/spec/attach.py)."""
        listing = getattr(self.store, "deployments", None)
        if listing is None:
            return {}
        return {c.name: c.spec for c in listing() if getattr(c.spec, "attached", False)}

    async def _observe(self, name: str, now: float) -> None:
        attached = self.attached.get(name)
        dep: Any = self.controller.supervisor.deployments.get(name)
        if attached is not None and dep is None:
            dep = AttachedView(attached)
            units = attached_units(attached, self.discovery.found(name))
            # an instance discovery no longer finds is not kept (nor its windows)
            watched = {(name, u["name"], u.get("url") or "") for u in units}
            self._targets = {k: v for k, v in self._targets.items() if k[0] != name or k in watched}
        elif dep is None:
            return
        else:
            attached, units = None, self.controller.status(name)
        states = await asyncio.gather(*(self._scrape(name, u, now) for u in units))
        targets = {u["name"]: s for u, s in zip(units, states, strict=True)}
        spec = dep.spec
        info = DeploymentInfo(
            name=name,
            simulated=str(spec.engine) == "sim",
            slo={
                "ttft_ms": spec.slo.ttft_ms,
                "itl_ms": spec.slo.itl_ms,
                "itl_stat": spec.slo.itl_stat,
            },
            kv_bytes_per_token=kv_bytes_per_token(spec.model),
        )
        changes = self._changes(name, now)
        pd = self._check_pd(name, str(spec.topology) == "colocated", units, targets, now, changes)
        frames: dict[str, Frame] = {
            w: build_frame(info, units, targets, w, now, pd) for w in WINDOWS
        }
        proxy = next((targets[u["name"]] for u in units if u.get("role") == "proxy"), None)
        for window, frame in frames.items():  # is each window evidence to decide from?
            real = real_requests(proxy.delta(window)) if proxy is not None and proxy.up else None
            frame["evidence"] = judge(real, changes, window, WINDOW_SECONDS[window], now)
        by_engines = attached is not None and not any(u["role"] == "proxy" for u in units)
        for window, frame in frames.items():
            frame["latency_source"] = "engines" if by_engines else "proxy"
            # no pdctl proxy: the engines' own histograms (observe/attached/watch.py)
            if by_engines:
                shown = engine_latency(
                    roles(units, targets, window, "prefill"),
                    roles(units, targets, window, "decode"),
                    spec.slo.ttft_ms,
                )
                frame["ttft"], frame["itl"] = shown["ttft"], shown["itl"]
                frame["slo_attainment"] = shown["slo_attainment"]
                frame["ttft_breakdown"] = engine_ttft_parts(
                    roles(units, targets, window, "prefill"),
                    roles(units, targets, window, "decode"),
                )
        found = self.discovery.section(name) if attached is not None else None
        if found is not None:
            for frame in frames.values():
                frame["discovery"] = found
        self.canary.tick(name, dep, canary_units(attached, units) if attached else units, now)
        extra = {key: value for key, f in self.sections.items() if (value := f(name)) is not None}
        for frame in frames.values():  # the last canary verdict beside the SLO figures
            frame["canary"] = self.canary.section(name, spec)
            frame.update(extra)  # type: ignore[typeddict-item]  # sections are Frame keys

        self.latest[name] = frames
        for window, frame in frames.items():
            topic = frame_topic(name, window)
            if self.hub.subscribers(topic):
                self.hub.publish(topic, encode(with_windows(frame, frames)))

    def _check_pd(
        self, name: str, colocated: bool, units, targets, now: float, changes: list[ChangeMark]
    ) -> Any:
        """Step the deployment's "is PD happening?" check (observe/sections/pd_check.py); a decode
        that is not running (stopped, failed) leaves it, and starts afresh when it runs."""
        decodes = [
            (u["name"], t.delta(CHECK_WINDOW) if (t := targets[u["name"]]).up else None)
            for u in units
            if u.get("role") == "decode" and u.get("state") in SCRAPED_STATES
        ]
        states, section, moved = check(
            colocated, decodes, self.pd_states.get(name, {}), now, pause_reason(changes, now)
        )
        self.pd_states[name] = states
        self._pd_events += [(name, t) for t in moved]
        return section

    def _changes(self, name: str, now: float) -> list[ChangeMark]:
        """The rollouts of `name` that run or ended lately (observe/sections/evidence.py marks)."""
        rollouts = getattr(self.controller, "rollouts", None)
        if rollouts is None:
            return []
        return marks(rollouts.history(name, 10), now, MARKS_WITHIN_S)

    async def _scrape(self, name: str, unit: dict[str, Any], now: float) -> TargetState:
        url = unit.get("url")
        target = self._targets.setdefault((name, unit["name"], url or ""), ScrapeTarget())
        scrape = None
        if url and unit.get("state") in SCRAPED_STATES and self._session is not None:
            scrape = await fetch_metrics(self._session, url, self.settings.timeout)
        target.take(scrape, bool(unit.get("attached")), now, f"{name}/{unit['name']}")
        if unit.get("attached"):
            moved = health_transition(name, unit, target.seen_up, target.up, target.why)
            if moved is not None or (target.seen_up is None and target.up):
                target.seen_up = target.up
            if moved is not None:
                self._health_events.append((name, moved))
        return target.state()

    # -- blocking work, in a thread -------------------------------------------------------

    def _housekeeping(
        self,
        points: list,
        prune_before: float | None,
        events: Sequence[tuple[str, Transition] | tuple[str, CanaryTransition]],
    ) -> None:
        for deployment, t in events:
            self.store.record("observe", t.kind, t.message, deployment, t.detail)
        self.history.write(points)
        if prune_before is not None:
            self.history.prune(prune_before)

    # -- queries --------------------------------------------------------------------------

    def frame(self, name: str, window: str = DEFAULT_WINDOW) -> Frame | None:
        frames = self.latest.get(name)
        return with_windows(frames[window], frames) if frames else None


async def start_observer(settings: Any, controller: Any, store: Any, hub: Hub) -> Observer:
    """The observer of a control plane whose controller runs here, started. `settings` is
    web.settings.Settings."""
    observer = Observer(
        controller,
        store,
        hub,
        ObserveSettings(
            interval=settings.scrape_interval,
            timeout=settings.scrape_timeout,
            history_step_s=settings.history_step_s,
            retention_s=settings.history_retention_hours * 3600.0,
            attach_hosts=tuple(settings.attach_hosts),
        ),
    )
    observer.sections["serving"] = serving_section(controller)  # the page header follows it
    await observer.start()
    return observer
