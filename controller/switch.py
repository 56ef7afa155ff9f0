"""Run a read/write switch: perform the steps of controller/switch_plan.py against the
supervisor and the deployment's proxy, time them, and keep a record an operator can watch.

One switch per deployment at a time; lifecycle calls wait their turn (409 while a switch
runs). A failed step leaves routing as good as it can (paused groups resumed, drains and
whole-request flags undone) and says which step failed.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from controller.deployment import DeploymentSpec
from controller.health import admin_headers
from controller.ports import AllocatedPorts
from controller.registry_expect import expected_registrations
from controller.render import node_address
from controller.supervisor import Supervisor, SupervisorError
from controller.switch_plan import Step, SwitchRejected, plan

BOTH_MODES = ("read", "write")
IDLE_TIMEOUT_S = 300.0  # in-flight requests finishing (long decodes)
READY_TIMEOUT_S = 180.0  # restart, health and registration
POLL_S = 0.1


class SwitchBusy(SwitchRejected):
    """Another switch, or an instance that is not healthy, stands in the way."""


@dataclass
class SwitchRecord:
    id: str
    deployment: str
    target: str
    strategy: str
    actor: str
    reason: str | None
    steps: list[str]
    state: str = "running"  # running | done | failed
    current: str | None = None
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    held_s: float | None = None  # hold: how long new requests waited
    degraded_s: float | None = None  # keep-serving: how long requests ran whole
    rejected: int | None = None  # requests the proxy refused (503) during the switch
    revision: int | None = None
    error: str | None = None
    timings: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class ProxyAdmin:
    """The few admin calls a switch makes to the deployment's proxy. `token` is asked for at
    each call: it is the proxy's own, and a proxy restarted meanwhile has a new one."""

    def __init__(self, base: str, token: Callable[[], str | None]) -> None:
        self.base = base.rstrip("/") + "/admin"
        self.token = token
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))

    @property
    def headers(self) -> dict[str, str]:
        return admin_headers(self.token())

    async def close(self) -> None:
        await self.session.close()

    async def instances(self) -> dict[str, dict[str, Any]]:
        async with self.session.get(self.base + "/instances", headers=self.headers) as r:
            r.raise_for_status()
            return {i["url"]: i for i in (await r.json())["instances"]}

    async def post(self, path: str, body: dict | None = None) -> None:
        async with self.session.post(self.base + path, json=body or {}, headers=self.headers) as r:
            if r.status == 404 and path.startswith("/instances/"):
                return  # not registered (yet): nothing to drain or flag
            r.raise_for_status()

    async def expect(self, registrations: list[dict[str, Any]]) -> None:
        """Tell the proxy which registrations to accept (connector/registry_trust.py)."""
        async with self.session.put(
            self.base + "/registry/expected", json={"expected": registrations}, headers=self.headers
        ) as r:
            r.raise_for_status()

    async def rejected(self) -> int:
        url = self.base.removesuffix("/admin") + "/metrics"
        async with self.session.get(url) as r:
            text = await r.text()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("pdctl_proxy_requests_total") and 'outcome="rejected"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return int(total)


class SwitchRunner:
    def __init__(
        self,
        supervisor: Supervisor,
        record: Callable[[str, str, str, str | None, dict | None], None],
    ) -> None:
        self.supervisor, self.record = supervisor, record
        self.records: dict[str, SwitchRecord] = {}
        self._running: dict[str, asyncio.Task] = {}

    def refuse_if_running(self, name: str) -> None:
        if name in self._running:
            raise SwitchBusy(f"a mode switch of {name!r} is in progress; wait for it to end")

    def history(self, name: str) -> list[SwitchRecord]:
        return [r for r in self.records.values() if r.deployment == name]

    def begin(
        self,
        name: str,
        spec: DeploymentSpec,
        ports: AllocatedPorts,
        target: str,
        strategy: str,
        actor: str,
        reason: str | None,
        commit: Callable[[DeploymentSpec], int],
    ) -> SwitchRecord:
        self.refuse_if_running(name)
        steps = plan(spec, target, strategy)
        units = self.supervisor.status(name) if name in self.supervisor.deployments else []
        if not units:
            raise SwitchBusy(f"{name!r} is not running: start it, or edit its mode instead")
        unwell = [f"{u['name']} is {u['state']}" for u in units if u["state"] != "RUNNING"]
        if unwell:
            raise SwitchBusy("every instance must be RUNNING before a switch: " + ", ".join(unwell))
        rec = SwitchRecord(
            uuid.uuid4().hex[:12],
            name,
            target,
            strategy,
            actor,
            reason,
            [s.describe() for s in steps],
        )
        self.records[rec.id] = rec
        self.record(
            actor,
            "switch.begin",
            f"{name}: switch to {target} mode by {strategy}" + (f" ({reason})" if reason else ""),
            name,
            {"switch": rec.id},
        )
        self._running[name] = asyncio.create_task(
            self._run(rec, spec, ports, steps, commit), name=f"switch-{name}"
        )
        return rec

    async def wait(self, switch_id: str) -> SwitchRecord:
        rec = self.records[switch_id]
        task = self._running.get(rec.deployment)
        if task is not None:
            await asyncio.shield(task)
        return rec

    async def close(self) -> None:
        for task in self._running.values():
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def _run(
        self,
        rec: SwitchRecord,
        spec: DeploymentSpec,
        ports: AllocatedPorts,
        steps: list[Step],
        commit: Callable[[DeploymentSpec], int],
    ) -> None:
        admin = ProxyAdmin(f"http://127.0.0.1:{ports.proxy}", lambda: self._token(rec.deployment))
        run = _Execution(self.supervisor, admin, rec.deployment)
        rejected_before = await _safe(admin.rejected(), 0)
        last_spec = spec
        host = node_address(self.supervisor.settings.launch)
        try:
            # Restarted instances register in the new mode: the proxy must expect that first.
            rec.current = "expect both modes"
            await admin.expect(expected_registrations(spec, ports, host, also_modes=BOTH_MODES))
            for step in steps:
                rec.current = step.describe()
                started = time.monotonic()
                await run.do(step)
                rec.timings.append(
                    {"step": step.describe(), "seconds": round(time.monotonic() - started, 3)}
                )
                if step.spec is not None:
                    last_spec = step.spec
            rec.revision = commit(last_spec)
            rec.state = "done"
        except asyncio.CancelledError:
            rec.state, rec.error = "failed", "cancelled (the control plane is stopping)"
            await run.undo()
            raise
        except (SwitchRejected, TimeoutError, aiohttp.ClientError, OSError) as exc:
            rec.state, rec.error = "failed", f"{rec.current}: {exc}"
            await run.undo()
        finally:
            running = self.supervisor.deployments.get(rec.deployment)
            final = running.spec if running is not None else spec
            # Back to exactly what runs now (done: the new mode; failed: whatever did start).
            await _safe(admin.expect(expected_registrations(final, ports, host)), None)
            rec.ended_at = time.time()
            rec.current = None
            rec.held_s, rec.degraded_s = run.held_s, run.degraded_s
            rec.rejected = max(0, await _safe(admin.rejected(), rejected_before) - rejected_before)
            await admin.close()
            self._running.pop(rec.deployment, None)
            kind = "switch.done" if rec.state == "done" else "switch.failed"
            took = rec.ended_at - rec.started_at
            message = (
                f"{rec.deployment}: switch to {rec.target} mode by {rec.strategy} "
                f"{'done' if rec.state == 'done' else 'failed'} in {took:.1f} s"
            )
            if rec.held_s is not None:
                message += f"; requests held {rec.held_s:.2f} s"
            if rec.degraded_s is not None:
                message += f"; whole requests (no hand-off) for {rec.degraded_s:.2f} s"
            if rec.rejected:
                message += f"; {rec.rejected} rejected with 503"
            if rec.error:
                message += f": {rec.error}"
            self.record(rec.actor, kind, message, rec.deployment, rec.to_json())

    def _token(self, name: str) -> str | None:
        try:
            return self.supervisor.admin_token(name)
        except SupervisorError:
            return None


async def _safe(coro, default):
    try:
        return await coro
    except (aiohttp.ClientError, OSError, TimeoutError):
        return default


class _Execution:
    """Performs steps; remembers what to undo if one fails."""

    def __init__(self, supervisor: Supervisor, admin: ProxyAdmin, name: str) -> None:
        self.supervisor, self.admin, self.name = supervisor, admin, name
        self.paused: set[str] = set()
        self.drained: set[str] = set()
        self.whole: set[str] = set()
        self.held_s: float | None = None
        self.degraded_s: float | None = None
        self._since: float | None = None

    def _urls(self, instances: tuple[str, ...]) -> list[str]:
        by_name = {u["name"]: u["url"] for u in self.supervisor.status(self.name)}
        return [by_name[i] for i in instances]

    async def do(self, step: Step) -> None:
        kind = step.kind
        if kind in ("hold_begin", "degrade_begin"):
            self._since = time.monotonic()
        elif kind == "hold_end":
            self.held_s = round(time.monotonic() - (self._since or time.monotonic()), 3)
        elif kind == "degrade_end":
            self.degraded_s = round(time.monotonic() - (self._since or time.monotonic()), 3)
        elif kind == "pause":
            await self.admin.post(f"/groups/{step.mode}/pause")
            self.paused.add(step.mode or "")
        elif kind == "resume":
            await self.admin.post(f"/groups/{step.mode}/resume")
            self.paused.discard(step.mode or "")
        elif kind in ("drain", "undrain"):
            for url in self._urls(step.instances):
                await self.admin.post(f"/instances/{kind}", {"url": url})
                (self.drained.add if kind == "drain" else self.drained.discard)(url)
        elif kind in ("whole_on", "whole_off"):
            on = kind == "whole_on"
            for url in self._urls(step.instances):
                await self.admin.post("/instances/whole", {"url": url, "whole": on})
                (self.whole.add if on else self.whole.discard)(url)
        elif kind == "wait_idle":
            await self._wait_idle(self._urls(step.instances))
        elif kind == "apply":
            units = self.supervisor.deployments[self.name]
            await self.supervisor.start(self.name, step.spec, units.ports)
        elif kind == "wait_ready":
            await self._wait_ready(step.instances, step.mode or "")
        else:
            raise SwitchRejected(f"unknown step {kind!r}")

    async def _wait_idle(self, urls: list[str]) -> None:
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        while True:
            listing = await self.admin.instances()
            busy = [u for u in urls if listing.get(u, {}).get("outstanding_requests", 0) > 0]
            if not busy:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"still serving after {IDLE_TIMEOUT_S:g} s: {busy}")
            await asyncio.sleep(POLL_S)

    async def _wait_ready(self, instances: tuple[str, ...], mode: str) -> None:
        """Restarted (RUNNING, healthy) and listed by the proxy in the new mode's group."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            units = {u["name"]: u for u in self.supervisor.status(self.name)}
            listing = await self.admin.instances()
            waiting = []
            for name in instances:
                unit = units[name]
                seen = listing.get(unit["url"], {})
                if (
                    unit["state"] != "RUNNING"
                    or seen.get("group") != mode
                    or not seen.get("healthy")
                ):
                    waiting.append(
                        f"{name} ({unit['state']}, proxy group {seen.get('group', 'none')})"
                    )
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"not ready in {mode} mode after {READY_TIMEOUT_S:g} s: " + ", ".join(waiting)
                )
            await asyncio.sleep(POLL_S)

    async def undo(self) -> None:
        for mode in list(self.paused):
            await _safe(self.admin.post(f"/groups/{mode}/resume"), None)
        for url in list(self.whole):
            await _safe(self.admin.post("/instances/whole", {"url": url, "whole": False}), None)
        for url in list(self.drained):
            await _safe(self.admin.post("/instances/undrain", {"url": url}), None)
