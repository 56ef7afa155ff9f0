"""Registrations the deployment's proxy refused, turned into events an operator reads: which
URL, which field, why, how often. Pure: fed the proxy's `GET /admin/registry` refusals and a
clock; says each refusal once, then again at most once a minute while it keeps coming."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from controller.clients.proxy_admin import Refusal

REPEAT_S = 60.0


@dataclass(slots=True)
class _Told:
    count: int
    at: float


@dataclass
class RefusalWatch:
    told: dict[tuple[str, str, str], _Told] = field(default_factory=dict)

    def news(self, refusals: Sequence[Refusal], now: float) -> list[str]:
        """Event messages for refusals that are new, or grew since they were last told a
        minute or more ago."""
        out = []
        for r in refusals:
            try:
                key = (str(r["url"]), str(r["reason"]), str(r["field"]))
                count = int(r["count"])
            except (KeyError, TypeError, ValueError):
                continue  # an answer of another shape says nothing we can report
            told = self.told.get(key)
            if told is not None and (count <= told.count or now - told.at < REPEAT_S):
                continue
            times = f" ({count} times so far)" if count > 1 else ""
            out.append(
                f"the proxy refused a registration from {key[0]}: field {key[2]!r}: "
                f"{r.get('message', key[1])}{times}"
            )
            self.told[key] = _Told(count, now)
        return out
