"""What the registry does with one registration: refuse it (naming the field), refresh a
known instance, move it (a change of mode or ports), or admit a new claim once its /health
answers. Pure: `now` is passed in; connector/membership.py performs the probes and routing.

A new claim is never routed to, nor does it take a place among the confirmed instances,
until its /health answers: until then it waits in a small pending set, so a flood of made-up
instances can fill only that set, and a claim whose probe failed is not probed again for one
heartbeat interval (ZMQ identities and loopback addresses are the sender's choice, so no
per-sender limit would hold). Under `pdctl serve` the controller's expectations decide first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from connector.registry.message import Registration
from connector.registry.table import RegistryTable
from connector.registry.trust import Expectations, Refusal, SenderAllowlist

MAX_COOLDOWN = 4096  # claims remembered as failed; the oldest are forgotten first
MAX_REFUSALS = 64  # recent refusals kept for the controller and operators


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: str  # refuse | admit | wait | refresh | change
    refusal: Refusal | None = None


@dataclass(slots=True)
class RefusalRecord:
    url: str
    reason: str
    field: str
    message: str
    first: float
    last: float
    count: int = 1

    def to_json(self) -> dict:
        return {
            "url": self.url,
            "reason": self.reason,
            "field": self.field,
            "message": self.message,
            "count": self.count,
            "first_seen_s": self.first,
            "last_seen_s": self.last,
        }


class RegistryGate:
    def __init__(
        self,
        table: RegistryTable,
        allow: SenderAllowlist,
        expectations: Expectations | None = None,
        max_pending: int = 16,
    ) -> None:
        self.table, self.allow, self.expectations = table, allow, expectations
        self.max_pending = max_pending
        self.pending: dict[str, Registration] = {}  # claims whose /health is being probed
        self._cooldown: OrderedDict[str, float] = OrderedDict()  # url -> not before
        # Recent refusals, one record per (url, reason, field), the latest last.
        self.refusals: OrderedDict[tuple[str, str, str], RefusalRecord] = OrderedDict()

    def judge(self, reg: Registration, peer: str | None, now: float, configured: bool) -> Verdict:
        """`configured`: the URL was given by flag or the admin API, which a registration may
        not override."""
        if configured:
            return self._refuse(
                reg,
                now,
                Refusal("configured", "http_address", f"{reg.url} is configured by flag or admin"),
            )
        refusal = self.allow.judge(reg, peer)
        if refusal is None and self.expectations is not None:
            refusal = self.expectations.judge(reg)
        if refusal is not None:
            return self._refuse(reg, now, refusal)
        known = self.table.get(reg.url)
        if known is None:
            return self._claim(reg, now)
        field = known.differs_from(reg)
        if field is None:
            self.table.beat(reg, now)
            return Verdict("refresh")
        if field == "role" and self.expectations is None:
            return self._refuse(
                reg,
                now,
                Refusal(
                    "role",
                    "type",
                    f"{reg.url} is registered as {known.role}; it may register as {reg.role} "
                    f"once it has been silent for {self.table.silence_limit(known):g} s",
                ),
            )
        changed_at = self.table.last_change(reg.url) or 0.0
        if now - changed_at < reg.interval * self.table.interval_scale:
            return self._refuse(
                reg,
                now,
                Refusal(
                    "flapping",
                    field,
                    f"{reg.url} changed its {field} again within one heartbeat interval",
                ),
            )
        self.table.beat(reg, now)
        return Verdict("change")

    def _claim(self, reg: Registration, now: float) -> Verdict:
        if reg.url in self.pending:
            self.pending[reg.url] = reg  # the probe under way confirms the latest claim
            return Verdict("wait")
        not_before = self._cooldown.get(reg.url)
        if not_before is not None and now < not_before:
            return Verdict("wait")
        self._cooldown.pop(reg.url, None)
        if len(self.table) >= self.table.max_instances:
            return self._refuse(
                reg,
                now,
                Refusal(
                    "full", "http_address", f"{self.table.max_instances} instances are registered"
                ),
            )
        if len(self.pending) >= self.max_pending:
            return self._refuse(
                reg,
                now,
                Refusal(
                    "pending",
                    "http_address",
                    f"{self.max_pending} new instances are waiting for their /health already",
                ),
            )
        self.pending[reg.url] = reg
        return Verdict("admit")

    def confirmed(self, url: str, now: float) -> Registration | None:
        """The probe answered: the claim becomes a registered instance (None if it was
        refused meanwhile, or the table is full)."""
        reg = self.pending.pop(url, None)
        if reg is None or self.table.beat(reg, now) == "full":
            return None
        return reg

    def unconfirmed(self, url: str, now: float) -> None:
        """The probe did not answer: forget the claim for one heartbeat interval."""
        reg = self.pending.pop(url, None)
        if reg is None:
            return
        self._cooldown[url] = now + reg.interval * self.table.interval_scale
        self._cooldown.move_to_end(url)
        while len(self._cooldown) > MAX_COOLDOWN:
            self._cooldown.popitem(last=False)

    def set_expectations(self, expectations: Expectations | None, now: float) -> list[str]:
        """New expectations; returns the registered URLs they refuse (drop them now). Not a
        refusal of their own: the controller narrowed the set, mostly after stopping them (a
        rollout's old instances); one still running is refused at its next heartbeat."""
        self.expectations = expectations
        if expectations is None:
            return []
        dropped = []
        for reg in self.table.registrations():
            if expectations.judge(reg) is not None:
                self.table.forget(reg.url)
                dropped.append(reg.url)
        for url in [u for u, reg in self.pending.items() if expectations.judge(reg)]:
            del self.pending[url]
        return dropped

    def _refuse(self, reg: Registration, now: float, refusal: Refusal) -> Verdict:
        key = (reg.url, refusal.reason, refusal.field)
        record = self.refusals.pop(key, None)
        if record is None:
            record = RefusalRecord(reg.url, *key[1:], refusal.message, now, now, 0)
        record.count, record.last, record.message = record.count + 1, now, refusal.message
        self.refusals[key] = record
        while len(self.refusals) > MAX_REFUSALS:
            self.refusals.popitem(last=False)
        return Verdict("refuse", refusal)
