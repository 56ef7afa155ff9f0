"""Instance groups: each instance runs one transfer mode and belongs to that mode's group; a
request is routed within one group. Health, drain, pause, outlier ejection and outstanding-token
load live here. Pure but for reading the monotonic clock to end an ejection: no I/O; the proxy
shell calls in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from connector.legs.rewrite import MODES
from connector.pool.policy import LeastTokens, RoundRobin
from domain.modes import Mode, Role, parse_role

ROLES = tuple(r.value for r in Role)


@dataclass(slots=True, eq=False)
class Instance:
    url: str
    role: Role
    mode: str  # read | write | colocated: the group it belongs to
    zmq_address: str | None = None
    dp_size: int = 1
    tp_size: int = 1
    source: str = "flag"  # flag | registry | admin
    healthy: bool = True
    draining: bool = False
    # Also serve whole requests (no hand-off) as if colocated: how a mode switch keeps
    # serving while the other side of the pair restarts. Registration does not reset it.
    whole: bool = False
    outstanding_requests: int = 0
    outstanding_tokens: int = 0
    served: int = 0
    failed: int = 0
    last_error: str | None = None
    # Outlier ejection: legs that failed in a row on this instance, and until when (monotonic)
    # it takes no new request after too many (its /health may answer while it stalls).
    failed_in_a_row: int = 0
    probes_failed: int = 0  # active /health probes failed in a row
    # When it last answered or streamed a byte on any leg (the flight clock,
    # connector/dispatch/flight.py): what the hang watchdog and the health probes judge by.
    moved_at: float = 0.0
    # When a connection to it was last refused (same clock): nothing listened, so the process
    # that held the KV blocks of the requests it prefilled before then is gone.
    refused_at: float = 0.0
    ejected_until: float = 0.0
    ejections: int = 0
    # Runtime role switching (connector/pool/pd_roles.py): the epoch it serves its role in (None:
    # it does not switch roles), and fenced: it answered 409, its role is being read again.
    pd_epoch: int | None = None
    pd_fenced: bool = False
    pd_read: bool = False  # its /v1/pd_role answered once (a role, or 404: it does not switch)
    _dp_next: int = 0

    @property
    def available(self) -> bool:
        ready = self.healthy and not self.draining and not self.pd_fenced
        return ready and self.ejected_until <= time.monotonic()

    def next_dp_rank(self) -> int | None:
        if self.dp_size <= 1:
            return None
        rank = self._dp_next % self.dp_size
        self._dp_next += 1
        return rank

    def begin(self, tokens: int) -> None:
        self.outstanding_requests += 1
        self.outstanding_tokens += tokens

    def end(self, tokens: int, ok: bool | None) -> None:
        """A request (an attempt) on it ended: served, failed here, or (None) failed on the
        other leg's instance, which says nothing about this one."""
        self.outstanding_requests -= 1
        self.outstanding_tokens -= tokens
        if ok:
            self.served += 1
        elif ok is False:
            self.failed += 1

    def describe(self) -> dict:
        return {
            "url": self.url,
            "role": self.role,
            "group": self.mode,
            "zmq_address": self.zmq_address,
            "dp_size": self.dp_size,
            "tp_size": self.tp_size,
            "source": self.source,
            "healthy": self.healthy,
            "draining": self.draining,
            "whole": self.whole,
            "outstanding_requests": self.outstanding_requests,
            "outstanding_tokens": self.outstanding_tokens,
            "served": self.served,
            "failed": self.failed,
            "last_error": self.last_error,
            "failed_in_a_row": self.failed_in_a_row,
            "ejected_for_s": round(max(0.0, self.ejected_until - time.monotonic()), 1),
            "ejections": self.ejections,
            "pd_epoch": self.pd_epoch,
            "pd_fenced": self.pd_fenced,
        }


@dataclass(slots=True)
class Group:
    mode: str
    paused: bool = False
    instances: dict[str, Instance] = field(default_factory=dict)

    def available(self, role: str) -> list[Instance]:
        """The instances of `role` that take requests. Ejection never empties a role: when
        every healthy, undrained one is ejected, they all take requests again (an ejection
        is a guess that others serve better; with none left, a 503 for all is worse)."""
        out = [i for i in self.instances.values() if i.role == role and i.available]
        if out:
            return out
        return [
            i
            for i in self.instances.values()
            if i.role == role and i.healthy and not i.draining and i.ejected_until
            if not i.pd_fenced
        ]

    def describe(self) -> dict:
        roles = {r: sum(1 for i in self.instances.values() if i.role == r) for r in ROLES}
        return {"mode": self.mode, "paused": self.paused, "instances": roles}


@dataclass(frozen=True, slots=True)
class Route:
    group: str
    prefill: Instance | None  # None in a colocated group
    decode: Instance  # the instance that streams to the client (colocated: the only one)


class InstancePool:
    """Groups by mode; instances keyed by URL. `on_change` fires when routing could change."""

    def __init__(self, policy: RoundRobin | LeastTokens) -> None:
        self.policy = policy
        self.groups: dict[str, Group] = {m: Group(m) for m in MODES}
        self._by_url: dict[str, Instance] = {}
        self._group_turn = 0
        self.on_change: Callable[[], None] = lambda: None

    def __iter__(self) -> Iterator[Instance]:
        return iter(list(self._by_url.values()))

    def get(self, url: str) -> Instance | None:
        return self._by_url.get(url)

    def upsert(
        self,
        url: str,
        role: str | Role,
        mode: str,
        *,
        zmq_address: str | None = None,
        dp_size: int = 1,
        tp_size: int = 1,
        source: str = "flag",
    ) -> Instance:
        """Add an instance, or update it in place; a new mode moves it to that mode's group."""
        role = parse_role(role)  # the admin API's older "both" is a colocated one
        if mode not in self.groups:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        # An encoder (connector/dispatch/encoders.py) moves no KV: it sits in any group, routed
        # apart.
        if role is not Role.ENCODE and (mode == Mode.COLOCATED) != (role == Role.COLOCATED):
            raise ValueError("colocated instances have role 'colocated', and only they do")
        url = url.rstrip("/")
        inst = self._by_url.get(url)
        if inst is None:
            inst = Instance(url, role, mode, zmq_address, dp_size, tp_size, source)
            self._by_url[url] = inst
        else:
            self.groups[inst.mode].instances.pop(url, None)
            inst.role, inst.mode, inst.zmq_address = role, mode, zmq_address
            inst.dp_size, inst.tp_size, inst.source = dp_size, tp_size, source
        self.groups[mode].instances[url] = inst
        self.on_change()
        return inst

    def remove(self, url: str) -> Instance | None:
        inst = self._by_url.pop(url.rstrip("/"), None)
        if inst is not None:
            self.groups[inst.mode].instances.pop(inst.url, None)
            self.on_change()
        return inst

    def set_draining(self, url: str, draining: bool) -> Instance | None:
        """Drain or undrain; an undrained instance is judged afresh (the controller undrains
        a process it restarted: its ejection was the old process's)."""
        inst = self._by_url.get(url.rstrip("/"))
        if inst is not None:
            if inst.draining and not draining:
                inst.ejected_until, inst.failed_in_a_row, inst.ejections = 0.0, 0, 0
            inst.draining = draining
            self.on_change()
        return inst

    def set_whole(self, url: str, whole: bool) -> Instance | None:
        inst = self._by_url.get(url.rstrip("/"))
        if inst is not None:
            inst.whole = whole
            self.on_change()
        return inst

    def encoders(self) -> list[Instance]:
        """The encode instances that take requests, across groups (Group.available's rule)."""
        return [i for g in self.groups.values() for i in g.available(Role.ENCODE)]

    def _whole_candidates(self) -> list[Instance]:
        """Colocated instances, plus prefill/decode instances told to serve whole requests."""
        return [
            i
            for i in self._by_url.values()
            if i.available and (i.role == Role.COLOCATED or i.whole)
        ]

    def set_health(self, inst: Instance, healthy: bool, error: str | None = None) -> None:
        if inst.healthy != healthy:
            inst.healthy = healthy
            if healthy:  # back from down: a new process, judged afresh
                inst.ejected_until, inst.failed_in_a_row, inst.ejections = 0.0, 0, 0
            self.on_change()
        if error is not None:
            inst.last_error = error

    def probed(
        self,
        inst: Instance,
        ok: bool,
        error: str | None,
        down_after: int = 2,
        *,
        served_meanwhile: bool = False,
        refused: bool = False,
    ) -> None:
        """An active /health probe's answer: one success brings an instance up; it goes down
        after `down_after` failures in a row. Judged by what the engine does, not by one slow
        reply (a loaded engine's API server may leave /health unanswered for seconds while
        it streams): a probe that failed while the instance answered or streamed on a leg
        (`served_meanwhile`) is not counted, and a probe alone never takes the last routable
        instance of its role in its group out of routing unless nothing listens (`refused`):
        its legs' own failures and timeouts judge it then (issue 39)."""
        if ok:
            inst.probes_failed = 0
            self.set_health(inst, True)
            return
        inst.last_error = error
        if refused:
            inst.refused_at = time.perf_counter()
        if served_meanwhile and not refused:
            return
        inst.probes_failed += 1
        if inst.healthy and inst.probes_failed < down_after:
            return
        if inst.healthy and not refused and not self.has_spare(inst):
            return  # the last of its role: a 503 for every request is worse than a slow one
        self.set_health(inst, False, error)

    def leg_ok(self, inst: Instance) -> None:
        """A leg served: it proves the instance alive, whatever a slow /health said."""
        inst.failed_in_a_row = 0
        inst.ejections = 0
        if not inst.healthy and inst.probes_failed:
            inst.probes_failed = 0
            self.set_health(inst, True)

    def leg_failed(
        self,
        inst: Instance,
        after: int,
        seconds: float,
        now: float,
        *,
        at_once: bool = False,
        max_share: float = 1.0,
    ) -> bool:
        """Count a failed leg; after `after` in a row (0: never), or at once when `at_once`
        (a refused connection, garbage, a hang: broken, not busy), eject the instance for
        `seconds`, doubling per ejection in a row up to 16x. Never the last available one of
        its role in its group (then failing at the leg timeout beats a 503 for all), and never
        past `max_share` of its role ejected at once. True when it was ejected."""
        inst.failed_in_a_row += 1
        if not after or (inst.failed_in_a_row < after and not at_once):
            return False
        if not self.may_eject(inst, max_share, now):
            return False
        span = seconds * 2 ** min(inst.ejections, 4)
        inst.ejected_until, inst.ejections = now + span, inst.ejections + 1
        inst.last_error = (
            f"ejected for {span:g} s after {inst.failed_in_a_row} failed requests in a row"
            + (f": {inst.last_error}" if at_once and inst.last_error else "")
        )
        inst.failed_in_a_row = 0
        self.on_change()
        return True

    def may_eject(self, inst: Instance, max_share: float, now: float) -> bool:
        """A spare of its role stays available in its group, and the ejected share of the
        role stays within `max_share` (a fault that hits every instance must not empty it)."""
        group = self.groups[inst.mode]
        same = [i for i in group.instances.values() if i.role == inst.role]
        if not [i for i in group.available(inst.role) if i is not inst]:
            return False
        ejected = sum(1 for i in same if i.ejected_until > now and i is not inst)
        return ejected + 1 <= int(max_share * len(same) + 1e-9)

    def has_spare(self, inst: Instance) -> bool:
        """Another instance of its role is available in its group."""
        return any(i is not inst for i in self.groups[inst.mode].available(inst.role))

    def pick_other(self, mode: str, role: str, tried: set[str]) -> Instance | None:
        """A retry's instance: an available one of `role` in the group not tried yet."""
        fresh = [i for i in self.groups[mode].available(role) if i.url not in tried]
        return self.policy.pick(f"{mode}/{role}", fresh) if fresh else None

    def set_paused(self, mode: str, paused: bool) -> Group:
        group = self.groups[mode]
        group.paused = paused
        self.on_change()
        return group

    def any_paused(self) -> bool:
        return any(g.paused for g in self.groups.values())

    def _ready(self) -> list[tuple[Group, list[Instance], list[Instance]]]:
        """Each unpaused group that can serve now, with its candidates (prefills and decodes;
        for the colocated group none and the whole-request ones), each read once."""
        ready: list[tuple[Group, list[Instance], list[Instance]]] = []
        for g in self.groups.values():
            if g.paused:
                continue
            if g.mode == "colocated":
                both = self._whole_candidates()
                if both:
                    ready.append((g, [], both))
                continue
            prefills = g.available("prefill")
            if prefills:
                decodes = g.available("decode")
                if decodes:
                    ready.append((g, prefills, decodes))
        return ready

    def route_possible(self) -> bool:
        return bool(self._ready())

    def route(self) -> Route | None:
        """A route in an unpaused group that can serve now, or None."""
        ready = self._ready()
        if not ready:
            return None
        if len(ready) > 1 and isinstance(self.policy, LeastTokens):
            group, prefills, decodes = min(ready, key=lambda r: _group_load(r[0]))
        else:
            group, prefills, decodes = ready[self._group_turn % len(ready)]
            self._group_turn += 1
        if group.mode == "colocated":
            return Route(group.mode, None, self.policy.pick("colocated/both", decodes))
        prefill = self.policy.pick(f"{group.mode}/prefill", prefills)
        decode = self.policy.pick(f"{group.mode}/decode", decodes)
        return Route(group.mode, prefill, decode)

    def why_unroutable(self) -> str:
        """A plain sentence naming what is missing, for the 503 body."""
        parts = []
        for g in self.groups.values():
            if not g.instances:
                continue
            roles = (Role.COLOCATED,) if g.mode == Mode.COLOCATED else (Role.PREFILL, Role.DECODE)
            missing = [r for r in roles if not g.available(r)]
            state = (
                "paused"
                if g.paused
                else (f"no available {' or '.join(missing)} instance" if missing else "ready")
            )
            parts.append(f"group {g.mode}: {state}")
        return "; ".join(parts) if parts else "no instances are registered or configured"

    def describe(self) -> dict:
        return {
            "groups": [g.describe() for g in self.groups.values()],
            "instances": [i.describe() for i in self._by_url.values()],
        }


def _group_load(group: Group) -> int:
    return sum(i.outstanding_tokens for i in group.instances.values())
