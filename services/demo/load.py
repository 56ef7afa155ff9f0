"""The demo pair's load: a control-plane-owned loop per deployment that offers streamed
completions at a fixed Poisson rate through its proxy, for as long as `pdctl serve` runs.

Why a loop in the control plane and not repeated `pdctl bench` runs: a bench run ends, and
its last requests drain while no new ones arrive, so every run boundary would put a lull in
the 1 min window the first screen reads; the loop has none, costs no process of its own (a
few requests a second on the serve's event loop), and ends with the serve that owns it. The
measurements are the proxy's (what the frames show), not this client's.

Bounded: the rate is fixed, arrivals past `max_in_flight` unfinished requests are skipped
(never queued), each request ends within `timeout`, and the loop offers nothing while the
deployment is not wholly RUNNING (not started yet, stopped by an operator, restarting), so a
stopped demo costs one status look a second."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.client import BenchClient, ServerUnreachable, fetch_model, open_session
from bench.config import BenchConfig
from domain.workload.datasets import random_requests

log = logging.getLogger("pdctl.demo")
POOL = 16  # distinct prompts, cycled (the pair runs without prefix caching)
IDLE_S = 1.0  # how often a deployment that is not running is looked at again


@dataclass(frozen=True)
class Offer:
    """What one deployment is offered: wall req/s, prompt and output lengths."""

    rate: float
    input_len: int
    output_len: int
    max_in_flight: int = 32
    timeout: float = 300.0
    seed: int = 0


def ready(units: list[dict[str, Any]]) -> bool:
    """Every process of the deployment is RUNNING (and there is one)."""
    return bool(units) and all(u.get("state") == "RUNNING" for u in units)


class DemoLoad:
    """One offering loop per deployment; `close()` cancels them and their requests."""

    def __init__(
        self,
        offer: Offer,
        status: Callable[[str], list[dict[str, Any]]],
        url_of: Callable[[str], str],
    ) -> None:
        self.offer = offer
        self._status = status
        self._url_of = url_of
        self._tasks: dict[str, asyncio.Task] = {}
        self.sent: dict[str, int] = {}
        self.skipped: dict[str, int] = {}

    def start(self, name: str) -> None:
        if name not in self._tasks:
            self._tasks[name] = asyncio.create_task(self._run(name), name=f"pdctl-demo-load-{name}")

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _run(self, name: str) -> None:
        rng = random.Random(f"{self.offer.seed}:{name}")
        pool = random_requests(POOL, self.offer.input_len, self.offer.output_len, 0.0, rng)
        self.sent[name] = self.skipped[name] = 0
        while True:  # until the serve closes it; each pass sleeps at least one gap
            await self._until_ready(name)
            config = BenchConfig(base_url=self._url_of(name), timeout=self.offer.timeout)
            async with open_session(config) as session:
                try:
                    model = await fetch_model(session, config)
                except ServerUnreachable as exc:
                    log.info("demo load on %s waits: %s", name, exc)
                    await asyncio.sleep(IDLE_S)
                    continue
                client = BenchClient(session, config, model)
                await self._offer(name, client, pool, rng)

    async def _until_ready(self, name: str) -> None:
        while not ready(self._status(name)):
            await asyncio.sleep(IDLE_S)

    async def _offer(self, name: str, client: BenchClient, pool: list, rng: random.Random) -> None:
        """Poisson arrivals while the deployment stays wholly RUNNING; its requests end here,
        before the session they use closes (cancelled when the serve closes the loop)."""
        in_flight: set[asyncio.Task] = set()
        try:
            while ready(self._status(name)):
                await asyncio.sleep(rng.expovariate(self.offer.rate))
                if len(in_flight) >= self.offer.max_in_flight:
                    self.skipped[name] += 1
                    continue
                request = pool[self.sent[name] % len(pool)]
                task = asyncio.create_task(client.send(request))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                self.sent[name] += 1
            await asyncio.gather(*in_flight, return_exceptions=True)
        finally:
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*list(in_flight), return_exceptions=True)
