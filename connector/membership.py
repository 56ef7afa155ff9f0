"""Who the proxy routes to, beyond its flags: instances that register over ZMQ (a claim,
routed to only once their /health answers; connector/registry/gate.py decides what to believe)
and the active /health probes that take instances out of routing and bring them back. The pool
(connector/pool/instances.py) holds the routing state; this is the I/O around it.
"""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

from connector.measure.metrics import ProxyMetrics
from connector.pool.instances import Instance, InstancePool
from connector.pool.pd_roles import RoleReader
from connector.registry.gate import RegistryGate
from connector.registry.table import (
    NEW_INTERVAL,
    OLD_INTERVAL,
    Registration,
    RegistryListener,
    RegistryTable,
)
from connector.registry.trust import Expectations, SenderAllowlist
from connector.settings import ProxySettings

log = logging.getLogger("connector.proxy")  # one log for the proxy's routing decisions
ADMIT_TRIES = 5
ADMIT_SPACING_S = 0.1
REPROBE_GAP_S = 0.5  # between on-demand rounds of probes of down instances (reprobe_down)


class Membership:
    def __init__(self, settings: ProxySettings, pool: InstancePool, metrics: ProxyMetrics) -> None:
        self.settings, self.pool, self.metrics = settings, pool, metrics
        self.table = RegistryTable(
            interval_scale=settings.heartbeat_scale, max_instances=settings.registry_max_instances
        )
        self.gate = RegistryGate(
            self.table,
            SenderAllowlist(settings.registry_allow),
            Expectations(settings.registry_expected)
            if settings.registry_expected is not None
            else None,
            settings.registry_max_pending,
        )
        self.listener: RegistryListener | None = None
        self.port: int | None = None  # the registry's, once listening
        self.session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task] = set()  # the health loop and one-off probes
        self._probing: set[str] = set()  # URLs with a probe under way
        self._probe_timeout = aiohttp.ClientTimeout(total=settings.health_timeout)
        # A claim holds a pending place while probed: short, so made-up ones free it soon.
        self._admit_timeout = aiohttp.ClientTimeout(total=min(settings.health_timeout, 2.0))
        # A request waits on it: an instance that cannot answer /health this fast stays down.
        self._reprobe_timeout = aiohttp.ClientTimeout(total=min(settings.health_timeout, 1.0))
        self.roles: RoleReader | None = None  # re-reads fenced roles each round (the proxy's)
        self._reprobe: asyncio.Future | None = None  # the round of probes requests share
        self._reprobed_at = -REPROBE_GAP_S

    def start(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        s = self.settings
        if s.registry_port is not None:
            self.listener = RegistryListener(
                s.host,
                s.registry_port,
                self.on_registration,
                self.on_reject,
                self.sweep,
                min(NEW_INTERVAL, OLD_INTERVAL) * s.heartbeat_scale / 2,
                s.default_registry_mode,
            )
            self.port = self.listener.start()
        if s.health_interval:
            self._track(asyncio.get_running_loop().create_task(self._check_health()))

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.listener is not None:
            await self.listener.stop()

    def _track(self, task: asyncio.Task) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def on_registration(self, reg: Registration, peer: str | None) -> None:
        """A registration is a claim, not proof: a new instance is routed to only once its
        /health answers (engines register before they listen, and anyone can send a
        registration), so made-up ones never take a request."""
        known = self.pool.get(reg.url)
        configured = known is not None and known.source != "registry"
        verdict = self.gate.judge(reg, peer, self.now(), configured)
        if verdict.kind == "refuse" and verdict.refusal is not None:
            r = verdict.refusal
            self.on_reject(r.reason, f"{reg.url}: field {r.field!r}: {r.message}")
        elif verdict.kind == "admit":
            self._track(asyncio.get_running_loop().create_task(self._admit(reg)))
        elif verdict.kind == "refresh" and known is not None and not known.healthy:
            # A heartbeat from an instance marked down: it restarted; look now rather
            # than at the next health round.
            self.probe_soon(known)
        elif verdict.kind == "change":
            log.info("registry: changed %s %s, now in group %s", reg.role, reg.url, reg.mode)
            self._route(reg)

    async def _admit(self, reg: Registration) -> None:
        """Probe a new claim; only an answer makes it an instance."""
        for attempt in range(ADMIT_TRIES):  # an engine registers just before it listens
            ok, _ = await self._health(reg.url, self._admit_timeout)
            if ok or attempt == ADMIT_TRIES - 1:
                break
            await asyncio.sleep(ADMIT_SPACING_S)
        if not ok:
            self.gate.unconfirmed(reg.url, self.now())
            return
        confirmed = self.gate.confirmed(reg.url, self.now())
        if confirmed is not None:
            log.info("registry: added %s %s in group %s", reg.role, reg.url, reg.mode)
            self._route(confirmed)

    def _route(self, reg: Registration) -> None:
        inst = self.pool.upsert(
            reg.url,
            reg.role,
            reg.mode,
            zmq_address=reg.zmq_address,
            dp_size=reg.dp_size,
            tp_size=reg.tp_size,
            source="registry",
        )
        self.pool.probed(inst, True, None)

    def set_expectations(self, expectations: Expectations | None) -> list[str]:
        """New expected registrations (the controller's); instances they refuse leave now."""
        dropped = self.gate.set_expectations(expectations, self.now())
        for url in dropped:
            inst = self.pool.get(url)
            if inst is not None and inst.source == "registry":
                self.pool.remove(url)
        return dropped

    def sweep(self) -> None:
        for reg in self.table.expire(self.now()):
            log.info("instance %s silent for several beats: dropped", reg.url)
            self.on_expiry(reg)

    def probe_soon(self, inst: Instance) -> None:
        """Probe until it answers (a short while), one probe run per instance at a time."""
        if self.session is None or inst.url in self._probing:
            return
        self._probing.add(inst.url)
        task = asyncio.get_running_loop().create_task(self._probe_until_up(inst))
        self._track(task)
        task.add_done_callback(lambda _: self._probing.discard(inst.url))

    def on_reject(self, reason: str, detail: str) -> None:
        """Counted always, logged for the first few and then every 1000th (a flood must not
        flood the log)."""
        counts = self.metrics.registry_rejected
        counts[reason] = n = counts.get(reason, 0) + 1
        if n <= 10 or n % 1000 == 0:
            log.warning("registry: refused (%s, %d so far): %s", reason, n, detail)

    def on_expiry(self, reg: Registration) -> None:
        inst = self.pool.get(reg.url)
        if inst is not None and inst.source == "registry":
            self.pool.remove(reg.url)

    async def _check_health(self) -> None:
        while True:
            await asyncio.sleep(self.settings.health_interval or 5.0)
            await asyncio.gather(*(self._probe(i) for i in self.pool), return_exceptions=True)

    async def _health(
        self, url: str, timeout: aiohttp.ClientTimeout | None = None
    ) -> tuple[bool, str | None]:
        ok, error, _ = await self._health_of(url, timeout)
        return ok, error

    async def _health_of(
        self, url: str, timeout: aiohttp.ClientTimeout | None = None
    ) -> tuple[bool, str | None, bool]:
        """/health's verdict, why not, and whether nothing listens (a refused connection)."""
        if self.session is None:
            return False, "no session", False
        try:
            async with self.session.get(
                url + "/health", timeout=timeout or self._probe_timeout
            ) as r:
                return r.status == 200, None if r.status == 200 else f"/health {r.status}", False
        except aiohttp.ClientConnectorError as exc:
            refused = isinstance(exc.os_error, ConnectionRefusedError)
            return False, f"/health: {type(exc).__name__}", refused
        except (aiohttp.ClientError, TimeoutError) as exc:
            return False, f"/health: {type(exc).__name__}", False

    async def _probe(self, inst: Instance, timeout: aiohttp.ClientTimeout | None = None) -> None:
        sent = time.perf_counter()  # the flight clock, which Instance.moved_at keeps
        ok, error, refused = await self._health_of(inst.url, timeout)
        served = inst.moved_at >= sent  # it answered or streamed a leg meanwhile
        self.pool.probed(inst, ok, error, served_meanwhile=served, refused=refused)
        if ok and (inst.pd_fenced or not inst.pd_read) and self.roles is not None:
            await self.roles.refresh(inst)  # first sight, or a 409 fenced it until it reads ready

    async def reprobe_down(self) -> bool:
        """Probe every instance marked down once, now, with a short deadline: a request that
        found no routable instance asks, since a process that came up since its last probe
        (up to --health-interval ago) would otherwise cost it a 503. The requests that ask at
        once share one round, and rounds are REPROBE_GAP_S apart. True when a round ran."""
        loop = asyncio.get_running_loop()
        if self._reprobe is None or self._reprobe.done():
            down = [i for i in self.pool if not i.healthy]
            if not down or loop.time() - self._reprobed_at < REPROBE_GAP_S:
                return False
            self._reprobed_at = loop.time()
            probes = (self._probe(i, self._reprobe_timeout) for i in down)
            self._reprobe = asyncio.gather(*probes, return_exceptions=True)
        await asyncio.shield(self._reprobe)
        return True

    async def _probe_until_up(self, inst: Instance, tries: int = 20, spacing: float = 0.1) -> None:
        for _ in range(tries):
            await self._probe(inst)
            if inst.healthy or self.pool.get(inst.url) is not inst:
                return
            await asyncio.sleep(spacing)
