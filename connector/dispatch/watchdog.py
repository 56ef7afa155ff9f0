"""The watchdog over the legs in flight: a stream silent past --decode-timeout ends, and each
tick judges which instances are hung (connector/dispatch/hangs.py) and which requests' KV is
lost, and ends those legs by cancelling their tasks (the relay answers for them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from connector.dispatch.flight import Flight, clock
from connector.dispatch.hangs import LegSeen, hung_instances, kv_lost, prompt_grace
from connector.pool.instances import Instance, InstancePool
from connector.settings import ProxySettings


@dataclass(slots=True)
class PrefillWait:
    """A prefill leg waiting for its answer since `since`; `hung`: the watchdog ended it."""

    inst: Instance
    since: float
    grace: float = 0.0  # its prompt's share of the first-byte deadline (dispatch/hangs.py)
    hung: bool = False


class Watchdog:
    """The legs the relay has in flight, by their task, and the loop that watches them."""

    def __init__(self, settings: ProxySettings, pool: InstancePool) -> None:
        self.settings, self.pool = settings, pool
        # streaming legs under the silence watchdog (cheaper than aiohttp's per-read timer)
        self.streams: dict[asyncio.Task, tuple[Flight, Instance]] = {}
        # prefill legs waiting for their answer, under the same watchdog
        self.prefills: dict[asyncio.Task, PrefillWait] = {}
        # told of an instance whose legs all went silent past the first-byte deadline
        self.on_hung: Callable[[Instance, str], None] = lambda inst, why: None

    async def run(self) -> None:
        """Cancel streaming legs whose upstream has been silent past --decode-timeout, and
        (--first-byte-timeout, on by default) find hung instances (`hung`)."""
        limit, first = self.settings.decode_timeout, self.settings.first_byte_timeout
        period = min(1.0, limit / 4, first / 4 if first else 1.0)
        while True:
            await asyncio.sleep(period)
            now = clock()
            for task, (flight, _) in list(self.streams.items()):
                if now - flight.last_read > limit and not flight.timed_out:
                    flight.timed_out = True
                    task.cancel()
            if first:
                self.hung(now, first)

    def hung(self, now: float, first: float) -> None:
        """Prefill and decode instances alike: one whose leg waits past `first` for its first
        byte (write mode's decode: counted from the prefill's answer) while nothing of it moved
        that long is hung (connector/dispatch/hangs.py). With a spare, its legs still waiting
        for their first byte end now (and are retried elsewhere), and the proxy hears of it
        (`on_hung`); without one, the leg timeouts decide. A read-mode decode leg past the
        same deadline whose prefill has since refused a connection ends too, spare or not: the
        KV it waits for is gone (`kv_lost`), and the request is retried on another prefill."""
        legs: list[LegSeen] = []
        by_url: dict[str, Instance] = {}
        for task, (flight, inst) in list(self.streams.items()):
            route = flight.route
            if route is None or route.prefill is None:
                continue  # colocated: its first byte waits for its own prefill
            by_url[inst.url] = inst
            if flight.prepared:
                legs.append(LegSeen(inst.url, None, flight.last_read))
            elif flight.prefill_end is not None or route.group != "write":
                since = max(flight.last_read, flight.prefill_end or 0.0)
                # its KV to place and pull, and the whole answer when it is not streamed
                grace = prompt_grace(flight.estimate[0]) + flight.answer_grace
                # read mode: the KV it waits for is on its prefill until the decode pulls it
                end, source = flight.prefill_end, route.prefill
                pulls = route.group != "write" and end is not None and not flight.timed_out
                if pulls and kv_lost(source.refused_at, end or 0.0, since + first + grace, now):
                    flight.timed_out, flight.kv_lost = True, source.url
                    task.cancel()
                    continue  # the request's loss, no sign against its decode
                legs.append(LegSeen(inst.url, since, since, grace))
            # else: the decode waits for the KV the prefill pushes: the prefill's time
        for wait in self.prefills.values():
            by_url[wait.inst.url] = wait.inst
            legs.append(LegSeen(wait.inst.url, wait.since, wait.since, wait.grace))
        moved = {url: inst.moved_at for url, inst in by_url.items()}
        for url in hung_instances(legs, moved, now, first):
            inst = by_url[url]
            if not self.pool.has_spare(inst):
                continue  # nowhere else to go: the leg's own timeout decides
            self._end_waiting(inst)
            self.on_hung(inst, f"no byte on any of its legs for {first:g} s")

    def _end_waiting(self, inst: Instance) -> None:
        """End the legs of a hung instance that have no byte yet: nothing reached the client."""
        for task, (flight, other) in list(self.streams.items()):
            if other is inst and not flight.prepared and not flight.timed_out:
                flight.timed_out = flight.first_byte_missed = True
                task.cancel()
        for task, wait in list(self.prefills.items()):
            if wait.inst is inst and not wait.hung:
                wait.hung = True
                task.cancel()
