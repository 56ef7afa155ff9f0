"""Perform the steps of controller/switch/plan.py against the supervisor and the deployment's
proxy, one handler per step kind (the table at the bottom), and remember what to undo.

Seams: the proxy's admin client (controller/clients/proxy_admin.py), the supervisor as `Fleet`, and
a
clock (controller/supervise/clock.py); tests pass fakes, no socket and no real time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.clients.proxy_admin import InstanceEntry, ProxyAdminError
from controller.launch.ports import AllocatedPorts
from controller.spec.deployment import DeploymentSpec
from controller.supervise.clock import Clock
from controller.switch.plan import Step, StepKind, SwitchRejected


class AdminCalls(Protocol):
    """What a switch asks of the proxy (ProxyAdminClient does it over HTTP)."""

    async def instances(self) -> list[InstanceEntry]: ...
    async def pause(self, group: str) -> None: ...
    async def resume(self, group: str) -> None: ...
    async def drain(self, url: str) -> bool: ...
    async def undrain(self, url: str) -> bool: ...
    async def set_whole(self, url: str, whole: bool) -> bool: ...
    async def add(self, url: str, role: str) -> None: ...
    async def remove(self, url: str) -> bool: ...
    async def expect(self, registrations: list[dict[str, Any]] | None) -> None: ...
    async def rejected(self) -> int: ...
    async def aclose(self) -> None: ...


class Running(Protocol):
    """A deployment as the supervisor runs it."""

    spec: DeploymentSpec
    ports: AllocatedPorts


class Fleet(Protocol):
    """What a switch asks of the supervisor (controller/supervise/supervisor.py)."""

    @property
    def deployments(self) -> Mapping[str, Running]: ...
    def status(self, name: str) -> list[dict[str, Any]]: ...
    async def start(
        self,
        name: str,
        spec: DeploymentSpec,
        ports: AllocatedPorts,
        revision: int | None = None,
        only: set[str] | None = None,
    ) -> None: ...
    def keep_launch(self, name: str, process: str, spec: DeploymentSpec) -> None: ...
    def proxy_told(self, name: str, url: str, role: str | None) -> None: ...
    async def restart(self, name: str, instance: str | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class Timeouts:
    idle_s: float = 300.0  # in-flight requests finishing (long decodes)
    ready_s: float = 180.0  # restart, health and registration
    poll_s: float = 0.1
    call_s: float = 30.0  # one call to the proxy or the supervisor (placement on a cluster)
    move_s: float = 120.0  # a role move: drain, change role, route
    gone_s: float = 75.0  # a dropped process: drain, SIGTERM, SIGKILL (the supervisor's)

    def deadline(self, step: Step) -> float:
        """How long `step` may take before the rollout fails at it."""
        if step.kind is StepKind.WAIT_IDLE:
            return self.idle_s + self.call_s
        if step.kind is StepKind.WAIT_READY:
            return self.ready_s + self.call_s
        if step.kind is StepKind.ROLE_MOVE:
            return self.move_s
        if step.kind is StepKind.WAIT_GONE:
            return self.gone_s + self.call_s
        return self.call_s


# Processes the proxy does not list among its routed instances: ready once RUNNING (the
# supervisor's health probe said so).
UNROUTED_ROLES = ("encode", "render")


class GaveUp(SwitchRejected):
    """A process a step waits for is FATAL: the supervisor stopped retrying its start."""


class StepTimeout(TimeoutError):
    """A wait step whose condition did not come true in time; the message says who waited."""


@dataclass
class Execution:
    """One switch's steps, performed in order; `undo()` puts routing back as well as it can."""

    fleet: Fleet
    admin: AdminCalls
    clock: Clock
    name: str
    timeouts: Timeouts = field(default_factory=Timeouts)
    paused: set[str] = field(default_factory=set)
    drained: set[str] = field(default_factory=set)
    whole: set[str] = field(default_factory=set)
    applied: int = 0  # apply steps begun: instances may run the new mode
    revision: int | None = None  # what apply steps converge processes to
    known_urls: dict[str, str] = field(default_factory=dict)  # processes that may be gone
    mover: Callable[[Step], Awaitable[None]] | None = None  # performs a role move step
    on_applied: Callable[[], Awaitable[None]] | None = None  # after each apply step
    held_s: float | None = None
    degraded_s: float | None = None
    _since: float | None = None
    target_ports: AllocatedPorts | None = None  # the revision's (new instances have some)

    async def do(self, step: Step) -> None:
        await HANDLERS[step.kind](self, step)

    async def undo(self, keep: bool = False) -> list[str]:
        """Resume paused groups and end whole-request flags (unless `keep`: a rollback takes
        them over, and they serve until it does), undrain what serves; each call is tried
        even if another fails. Returns what could not be undone. A drained process that is
        not RUNNING (the rollout restarted it) stays drained: the supervisor undrains it
        once it is ready, and until then a request sent there would find nothing serving."""
        left = []
        for group in [] if keep else sorted(self.paused):
            left += await self._try(f"resume {group}", self.admin.resume(group))
        for url in [] if keep else sorted(self.whole):
            left += await self._try(f"whole off {url}", self.admin.set_whole(url, False))
        serving = self._serving()
        for url in sorted(self.drained & serving):
            left += await self._try(f"undrain {url}", self.admin.undrain(url))
        return left

    def _serving(self) -> set[str]:
        """The URLs of the processes RUNNING now."""
        if self.name not in self.fleet.deployments:
            return set()
        return {u["url"] for u in self.fleet.status(self.name) if u["state"] == "RUNNING"}

    async def _try(self, what: str, call: Awaitable[Any]) -> list[str]:
        try:
            await call
        except ProxyAdminError as exc:
            return [f"{what}: {exc}"]
        return []

    def urls(self, instances: tuple[str, ...]) -> list[str]:
        by_name = {**self.known_urls, **{u["name"]: u["url"] for u in self.fleet.status(self.name)}}
        missing = [i for i in instances if i not in by_name]
        if missing:
            raise SwitchRejected(f"no process {', '.join(missing)} in {self.name}")
        return [by_name[i] for i in instances]

    # -- handlers ----------------------------------------------------------------------------

    async def _begin_window(self, step: Step) -> None:
        self._since = self.clock.now()

    def _window(self) -> float:
        now = self.clock.now()
        return round(now - (self._since if self._since is not None else now), 3)

    async def _hold_end(self, step: Step) -> None:
        self.held_s = self._window()

    async def _degrade_end(self, step: Step) -> None:
        self.degraded_s = self._window()

    async def _pause(self, step: Step) -> None:
        group = step.mode or ""
        self.paused.add(group)  # before the call: see _drain
        await self.admin.pause(group)

    async def _resume(self, step: Step) -> None:
        group = step.mode or ""
        await self.admin.resume(group)
        self.paused.discard(group)

    async def _drain(self, step: Step) -> None:
        for url in self.urls(step.instances):
            # Noted before the call: a call cut short (an abort, a step's deadline) may have
            # reached the proxy all the same, and undo() must put back what it may have done.
            self.drained.add(url)
            await self.admin.drain(url)

    async def _undrain(self, step: Step) -> None:
        for url in self.urls(step.instances):
            await self.admin.undrain(url)
            self.drained.discard(url)

    async def _whole_on(self, step: Step) -> None:
        for url in self.urls(step.instances):
            self.whole.add(url)  # before the call: see _drain
            await self.admin.set_whole(url, True)

    async def _whole_off(self, step: Step) -> None:
        for url in self.urls(step.instances):
            await self.admin.set_whole(url, False)
            self.whole.discard(url)

    async def _apply(self, step: Step) -> None:
        if step.spec is None:
            raise SwitchRejected(f"{step.describe()}: an apply step carries the spec to run")
        self.applied += 1
        ports = self.target_ports or self.fleet.deployments[self.name].ports
        only = set(step.instances) if step.instances else None
        await self.fleet.start(self.name, step.spec, ports, self.revision, only)
        if self.on_applied is not None:  # where processes run now (a new node) changes whom
            await self.on_applied()  # the proxy must accept

    async def _add(self, step: Step) -> None:
        roles = {u["name"]: u["role"] for u in self.fleet.status(self.name)}
        for name, url in zip(step.instances, self.urls(step.instances), strict=True):
            role = roles.get(name, "decode")
            await self.admin.add(url, role)
            self.fleet.proxy_told(self.name, url, role)  # what a proxy restart lists

    async def _forget(self, step: Step) -> None:
        for url in self.urls(step.instances):
            await self.admin.remove(url)
            self.fleet.proxy_told(self.name, url, None)
            self.drained.discard(url)

    async def _restart(self, step: Step) -> None:
        self.applied += 1
        for name in step.instances:
            await self.fleet.restart(self.name, name)

    async def _keep_proxy(self, step: Step) -> None:
        if step.spec is not None:
            self.fleet.keep_launch(self.name, "proxy", step.spec)

    async def _role_move(self, step: Step) -> None:
        if self.mover is None:
            raise SwitchRejected(f"{step.describe()}: no role mover was given")
        await self.mover(step)

    async def _wait_idle(self, step: Step) -> None:
        urls = self.urls(step.instances)

        async def busy() -> list[str]:
            listing = {e["url"]: e for e in await self.admin.instances()}
            return [u for u in urls if listing.get(u, {}).get("outstanding_requests", 0) > 0]

        await self._until(busy, self.timeouts.idle_s, "still serving")

    async def _wait_ready(self, step: Step) -> None:
        """Restarted (RUNNING, healthy) and listed by the proxy as healthy, in the new mode's
        group when the step names one; the proxy itself: RUNNING and healthy."""
        mode = step.mode

        async def waiting() -> list[str]:
            units = {u["name"]: u for u in self.fleet.status(self.name)}
            gave_up = [n for n in step.instances if units.get(n, {}).get("state") == "FATAL"]
            if gave_up:  # no use waiting out the deadline: the supervisor stopped trying
                raise GaveUp(
                    f"{', '.join(gave_up)} gave up starting (FATAL); its events and "
                    "`pdctl logs` say why"
                )
            names = [n for n in step.instances if n != "proxy"]
            listing = {e["url"]: e for e in await self.admin.instances()} if names else {}
            out = []
            for name in step.instances:
                unit = units.get(name)
                if unit is None:
                    out.append(f"{name} (not supervised)")
                    continue
                if name == "proxy" or unit.get("role") in UNROUTED_ROLES:
                    if unit["state"] != "RUNNING":
                        out.append(f"{name} ({unit['state']})")
                    continue
                seen = listing.get(unit["url"], {})
                if (
                    unit["state"] != "RUNNING"
                    or (mode is not None and seen.get("group") != mode)
                    or not seen.get("healthy")
                ):
                    out.append(f"{name} ({unit['state']}, proxy group {seen.get('group', 'none')})")
            return out

        how = f"not ready in {mode} mode" if mode else "not ready"
        await self._until(waiting, self.timeouts.ready_s, how)

    async def _wait_gone(self, step: Step) -> None:
        """The processes a revision drops have stopped and are forgotten: their ports are
        free for what comes next, and nothing is listed that the revision does not have."""

        async def left() -> list[str]:
            units = {u["name"]: u["state"] for u in self.fleet.status(self.name)}
            return [f"{n} ({units[n]})" for n in step.instances if n in units]

        await self._until(left, self.timeouts.gone_s, "still stopping")

    async def _until(
        self, pending: Callable[[], Awaitable[list[str]]], timeout: float, what: str
    ) -> None:
        deadline = self.clock.now() + timeout
        while left := await _answered(pending):
            if self.clock.now() > deadline:
                raise StepTimeout(f"{what} after {timeout:g} s: " + ", ".join(left))
            await self.clock.sleep(self.timeouts.poll_s)


async def _answered(pending: Callable[[], Awaitable[list[str]]]) -> list[str]:
    """What is still pending; a proxy that does not answer yet (it is starting, or
    restarting) is one more thing to wait for, until the step's deadline."""
    try:
        return await pending()
    except ProxyAdminError as exc:
        return [f"the proxy does not answer ({exc})"]


Handler = Callable[[Execution, Step], Awaitable[None]]

# Every step kind and what performs it.
HANDLERS: dict[StepKind, Handler] = {
    StepKind.DRAIN: Execution._drain,
    StepKind.UNDRAIN: Execution._undrain,
    StepKind.WHOLE_ON: Execution._whole_on,
    StepKind.WHOLE_OFF: Execution._whole_off,
    StepKind.PAUSE: Execution._pause,
    StepKind.RESUME: Execution._resume,
    StepKind.WAIT_IDLE: Execution._wait_idle,
    StepKind.APPLY: Execution._apply,
    StepKind.WAIT_READY: Execution._wait_ready,
    StepKind.WAIT_GONE: Execution._wait_gone,
    StepKind.DEGRADE_BEGIN: Execution._begin_window,
    StepKind.DEGRADE_END: Execution._degrade_end,
    StepKind.HOLD_BEGIN: Execution._begin_window,
    StepKind.HOLD_END: Execution._hold_end,
    StepKind.ADD: Execution._add,
    StepKind.FORGET: Execution._forget,
    StepKind.KEEP_PROXY: Execution._keep_proxy,
    StepKind.RESTART: Execution._restart,
    StepKind.ROLE_MOVE: Execution._role_move,
}
