"""A prefill restart must never wedge a decode. Real connectors keep the agent (NIXL) or
session (MoRIIO) of the prefill a decode first met; when that prefill restarts at the same
address, the decode's transfers through the stale one fail or hang until the decode restarts
(vLLM issue 49238, PR 50047; llm-d 2187). vLLM has no call that drops it, so the controller
restarts what is stale: after a prefill of a deployment came back RUNNING as a new process,
each decode that kept running and whose failures grew by
`failures` within `window_s` is restarted, once per prefill restart, one decode at a time and
only while every other decode runs (the spares serve meanwhile), with an event that says why.
Its failures: the failed KV transfers its /metrics count (NIXL) plus the failed legs the proxy
counts on it (/admin/instances; older MoRIIO exports no transfer counter). The proxy
meanwhile retries elsewhere (connector/legs/retry.py). And since the routing may never pair the
restarted prefill with a stale decode, each decode's hand-off with it is checked at once
(controller/clients/pair_check.py): a failed check makes the decode stale, a good one clears it.

`StaleWatch.step` is pure (`now` in, the decodes to restart out); `check` is the shell that
reads the counters, only while a prefill restart is being watched, at most every
`READ_EVERY_S` and within `READ_TIMEOUT_S` (a hung decode must not slow the supervisor).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Protocol

from controller.clients import pair_check
from controller.clients.health import same_instance
from controller.clients.pair_check import PairProbe
from controller.clients.proxy_admin import InstanceEntry
from controller.supervise import machine as m
from controller.supervise.units import Supervised, Unit

READ_EVERY_S = 1.0
READ_TIMEOUT_S = 1.0
_STALE_WHY = (
    "its handshake with the old {prefill} is stale (a decode keeps the agent of the "
    "prefill it first met)"
)


@dataclass
class StaleWatch:
    failures: int = 2  # failures since the prefill came back that make a decode stale
    window_s: float = 60.0  # how long after a prefill restart its decodes are watched
    _pids: dict[str, int] = field(default_factory=dict)  # prefill -> its running pid
    _since: dict[str, tuple[float, dict[str, tuple[int, float]]]] = field(default_factory=dict)
    next_read: float = 0.0  # the shell's: when the counters may be read again
    # (prefill, decode) -> a pair check's verdict (controller/clients/pair_check.py): "ok", "stale:
    # why" or "unknown" (inconclusive every try)
    verdicts: dict[tuple[str, str], str] = field(default_factory=dict)
    # the shell's: pair checks in flight, tries made, when an inconclusive one may run again
    pending: dict[tuple[str, str], asyncio.Task] = field(default_factory=dict)
    tries: dict[tuple[str, str], int] = field(default_factory=dict)
    retry_at: dict[tuple[str, str], float] = field(default_factory=dict)

    def watching(self, now: float) -> bool:
        return any(now - at <= self.window_s for at, _ in self._since.values())

    def acted(self, decode: str) -> None:
        """`decode` is being restarted: its agents will be fresh."""
        for _, base in self._since.values():
            base.pop(decode, None)
        for key in [k for k in self.verdicts if k[1] == decode]:
            del self.verdicts[key]

    def unchecked(self, now: float) -> list[tuple[str, str]]:
        """(prefill, decode) pairs watched since the prefill restarted, not yet checked."""
        return [
            (prefill, decode)
            for prefill, (at, base) in self._since.items()
            if now - at <= self.window_s
            for decode in base
            if (prefill, decode) not in self.verdicts
        ]

    def new_process(self, prefills: dict[str, int | None]) -> bool:
        """A prefill runs as another process than the one last seen."""
        return any(
            p is not None and self._pids.get(n) not in (None, p) for n, p in prefills.items()
        )

    def step(
        self,
        prefills: dict[str, int | None],
        decodes: dict[str, tuple[int, float | None]],
        now: float,
    ) -> list[tuple[str, str]]:
        """`prefills`: name -> pid while RUNNING (else None); `decodes`: name -> (pid, its
        failed-transfer count, None when unread). Returns (decode, why) to restart."""
        for name, pid in prefills.items():
            known = self._pids.get(name)
            if pid is None:
                continue
            if known is not None and pid != known:  # a new process of this prefill, running
                base = {d: (dpid, n) for d, (dpid, n) in decodes.items() if n is not None}
                if not base and decodes:
                    continue  # the counters were not read: it stays new until they are
                self._since[name] = (now, base)
                for key in [k for k in self.verdicts if k[0] == name]:
                    del self.verdicts[key]  # checks of the process before
            self._pids[name] = pid
        out: list[tuple[str, str]] = []
        for prefill, (at, base) in list(self._since.items()):
            if now - at > self.window_s:
                del self._since[prefill]
                continue
            for decode, (dpid, count) in decodes.items():
                if decode not in base:
                    continue
                bpid, before = base[decode]
                if dpid != bpid:  # restarted meanwhile: fresh agents, nothing stale
                    del base[decode]
                    continue
                checked = self.verdicts.get((prefill, decode), "")
                if checked == "ok":  # its hand-off with the new process works
                    del base[decode]
                    continue
                if checked.startswith("stale: "):
                    out.append((decode, f"{checked[7:]}: {_STALE_WHY.format(prefill=prefill)}"))
                    continue
                if count is None:
                    continue
                if count - before >= self.failures:
                    out.append(
                        (
                            decode,
                            f"{count - before:g} KV transfers failed since {prefill} restarted "
                            f"{now - at:.1f} s ago: {_STALE_WHY.format(prefill=prefill)}",
                        )
                    )
        return out


class Counters(PairProbe, Protocol):
    async def proxy_instances(
        self, proxy_url: str, token: str | None
    ) -> list[InstanceEntry] | None: ...


async def check(dep: Supervised, watch: StaleWatch, probe: Counters, now: float) -> list:
    """The decodes of `dep` to restart now, with why (reads /metrics only while watching)."""
    running = {
        u.launch.name: u
        for u in dep.instances()
        if u.machine.state is m.State.RUNNING and u.machine.pid is not None
    }
    prefills = {
        u.launch.name: (u.machine.pid if u.launch.name in running else None)
        for u in dep.instances()
        if u.launch.role == "prefill"
    }
    # A decode that does not answer its probes is the health checks' to replace (and its
    # /metrics would only time out).
    decodes_up = [
        u for u in running.values() if u.launch.role == "decode" and u.healthy is not False
    ]
    counts: list[float | None] = [None] * len(decodes_up)
    listed: list[InstanceEntry] | None = None
    new = watch.new_process(prefills)
    if decodes_up and (new or watch.watching(now)) and now >= watch.next_read:
        watch.next_read = now + READ_EVERY_S
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(READ_TIMEOUT_S):
                counts, listed = await _failures(dep, decodes_up, probe)
    decodes = {
        u.launch.name: (u.machine.pid or 0, n) for u, n in zip(decodes_up, counts, strict=True)
    }
    stale = watch.step(prefills, decodes, now)
    _collect_checks(watch, now)
    _start_checks(dep, watch, probe, running, now)
    if not stale:
        return []
    decode = stale[0][0]
    others = [u for u in dep.instances() if u.launch.role == "decode" and u.launch.name != decode]
    if not all(_serving(u, listed) for u in others):
        return []  # one at a time, and only while the others serve
    watch.acted(decode)
    return stale[:1]


def _serving(unit: Unit, listed: list[InstanceEntry] | None) -> bool:
    """Running, answering its probes, and routed to by the proxy (not drained or ejected)."""
    if unit.machine.state is not m.State.RUNNING or unit.healthy is not True:
        return False
    entry = next((e for e in listed or [] if same_instance(e, unit.launch.url)), None)
    if entry is None:
        return listed is None  # the proxy's view unread: the supervisor's alone
    return (
        bool(entry.get("healthy", True))
        and not entry.get("draining")
        and not (entry.get("ejected_for_s") or 0)
    )


async def _failures(
    dep: Supervised, decodes: list[Unit], probe: Counters
) -> tuple[list[float | None], list[InstanceEntry] | None]:
    """Each decode's failures: failed KV transfers (its /metrics) + failed legs (the proxy),
    and the proxy's listing."""
    listed, own = await asyncio.gather(
        probe.proxy_instances(dep.proxy.launch.url, dep.admin_token),
        asyncio.gather(*(probe.failed_transfers(u.launch.url) for u in decodes)),
    )
    out: list[float | None] = []
    for unit, metric in zip(decodes, own, strict=True):
        entry = next((e for e in listed or [] if same_instance(e, unit.launch.url)), None)
        legs = entry.get("failed") if entry is not None else None
        parts = [v for v in (metric, legs) if isinstance(v, int | float)]
        out.append(float(sum(parts)) if parts else None)
    return out, listed


def _start_checks(
    dep: Supervised, watch: StaleWatch, probe: Counters, running: dict[str, Unit], now: float
) -> None:
    """A pair check for each decode watched since a prefill restarted, once the prefill
    answers its probes (controller/clients/pair_check.py); each runs as its own task."""
    if dep.proxy.machine.state is not m.State.RUNNING:
        return
    for key in watch.unchecked(now):
        if key in watch.pending or now < watch.retry_at.get(key, 0.0):
            continue
        prefill, decode = (running.get(name) for name in key)
        if prefill is None or decode is None or prefill.healthy is not True:
            continue
        if decode.healthy is False:
            continue  # the health checks' to replace
        control = next(
            (
                u.launch.url
                for n, u in running.items()
                if u.launch.role == "prefill" and n != key[0] and u.healthy is True
            ),
            None,
        )
        watch.pending[key] = asyncio.create_task(
            pair_check.run(
                probe,
                dep.proxy.launch.url,
                dep.admin_token,
                dep.spec.model,
                (key[0], prefill.launch.url),
                decode.launch.url,
                control,
            ),
            name=f"pdctl-pair-check-{dep.name}-{key[0]}-{key[1]}",
        )


def _collect_checks(watch: StaleWatch, now: float) -> None:
    """Keep the verdicts of the checks that ended; an inconclusive one is tried again."""
    for key, task in list(watch.pending.items()):
        if not task.done():
            continue
        del watch.pending[key]
        result = None if task.cancelled() or task.exception() else task.result()
        if result is not None:
            watch.verdicts[key] = result
            continue
        watch.tries[key] = watch.tries.get(key, 0) + 1
        if watch.tries[key] >= pair_check.TRIES:
            watch.verdicts[key] = "unknown"  # the failures alone judge it
        watch.retry_at[key] = now + pair_check.RETRY_AFTER_S


async def cancel_checks(watch: StaleWatch) -> None:
    """The supervisor stops: no check outlives it."""
    for task in watch.pending.values():
        task.cancel()
    await asyncio.gather(*watch.pending.values(), return_exceptions=True)
    watch.pending.clear()
