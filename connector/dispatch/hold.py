"""Waiting for a route: a request that finds none while a group is paused, or while the proxy
has just started with a registry, waits in a bounded hold queue instead of failing at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from connector.errors import HoldRejected, NoInstance
from connector.measure.metrics import ProxyMetrics
from connector.pool.instances import InstancePool, Route
from connector.settings import ProxySettings


class HoldQueue:
    """Hands out routes; `notify` (the pool's on_change) wakes every held request to retry."""

    def __init__(self, settings: ProxySettings, pool: InstancePool, metrics: ProxyMetrics) -> None:
        self.settings, self.pool, self.metrics = settings, pool, metrics
        self._changed = asyncio.Event()
        self._warm_until = 0.0  # loop time until which an empty pool waits (startup grace)
        # Probes the instances marked down, now (connector/membership.py reprobe_down); True
        # when it probed any. None: nothing to ask.
        self.reprobe: Callable[[], Awaitable[bool]] | None = None

    def start(self) -> None:
        """On the running loop: a fresh event, and the startup grace when a registry is on."""
        self._changed = asyncio.Event()
        if self.settings.registry_port is not None:
            self._warm_until = asyncio.get_running_loop().time() + self.settings.startup_grace

    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def acquire_route(self) -> Route:
        """A route now; or, while a group is paused or the proxy is just starting, wait in
        the bounded hold queue."""
        route = self.pool.route()
        if route is not None:
            return route
        arrived = asyncio.get_running_loop().time()
        # An instance may have come up since its last probe: ask it before refusing.
        if self.reprobe is not None and await self.reprobe():
            route = self.pool.route()
            if route is not None:
                return route
        s = self.settings
        if self._warming():
            try:
                return await self._hold(
                    self._warm_until,
                    self._warming,
                    f"no instance became routable within the proxy's first {s.startup_grace:g} "
                    "s (--startup-grace)",
                )
            except HoldRejected:
                # A pause (a mode switch) that outlasts the grace holds as any pause does:
                # the request keeps its hold deadline, counted from its arrival.
                if not self.pool.any_paused() or self._full():
                    raise
        if not self.pool.any_paused():
            raise NoInstance(f"no instance can serve this request: {self.pool.why_unroutable()}")
        return await self._hold(
            arrived + s.hold_deadline,
            self.pool.any_paused,
            f"dispatch stayed paused past the hold deadline ({s.hold_deadline:g} s)",
        )

    def _full(self) -> bool:
        return self.metrics.held >= self.settings.hold_queue

    def _warming(self) -> bool:
        """Just started with a registry: instances come back with their next heartbeat and
        are routed to once their /health answers."""
        return asyncio.get_running_loop().time() < self._warm_until

    async def _hold(
        self, deadline: float, still_waiting: Callable[[], bool], expired: str
    ) -> Route:
        """Wait for a route while `still_waiting()` and before `deadline` (loop time)."""
        s, m = self.settings, self.metrics
        if self._full():
            raise HoldRejected(
                f"dispatch is paused and the hold queue is full ({s.hold_queue} requests)",
                retry_after=s.hold_deadline,
            )
        loop = asyncio.get_running_loop()
        m.held += 1
        try:
            while (remaining := deadline - loop.time()) > 0:
                changed = self._changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
                route = self.pool.route()
                if route is not None:
                    return route
                if not still_waiting():
                    break
        finally:
            m.held -= 1
        route = self.pool.route()
        if route is not None:
            return route
        if self.pool.any_paused() or still_waiting():
            raise HoldRejected(expired, retry_after=s.hold_deadline)
        raise NoInstance(f"no instance can serve this request: {self.pool.why_unroutable()}")
