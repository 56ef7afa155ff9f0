"""The autopilot's leading signal (pure): what the window's arrivals need of each role.

A backlog signal (a prefill queue, TTFT or ITL over its line) shows a shift of the workload
only once a backlog has built, and still shows the old shortage until that backlog clears. The
arrivals show it at once: the proxy counts the prompt and answer tokens each request brings
(connector/measure/demand.py), and the capacity model (controller/autopilot/capacity.py) turns them
into
the instances of each role they keep busy. A role that needs more than it has
(`demand_high`, 1.0: the arrivals outrun it, so its queue can only grow) while the other role
would keep enough after giving one up is short now: move before the queue says so.

Each role's need also carries its queue: the requests waiting at its instances now, each
costing what an arrival of the window's mix costs, to be cleared within a window. Without it a
role that the arrivals alone no longer outrun would look served while its backlog still grows
old requests past their targets.

The same figures veto a backlog-led move that would leave the role it takes from short.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

MIN_ARRIVALS = 10  # requests over the window before their mix says anything


class Capacity(Protocol):
    source: str

    def prefill_seconds(self, prompt: float) -> float: ...

    def decode_seconds(self, prompt: float, output: float) -> float: ...


@dataclass(frozen=True, slots=True)
class Demand:
    rate: float  # client requests per second arriving
    prompt_mean: float  # tokens per request, as the proxy judged them at arrival
    output_mean: float
    prefill: float  # prefill instances the arrivals and the queue keep busy
    decode: float  # decode instances likewise
    source: str
    prefill_queued: float = 0.0  # of which the queue now, cleared within a window
    decode_queued: float = 0.0

    def share(self, role: str, instances: int) -> float:
        """The arrivals' need of `role` over what `instances` of it give (1: all of it)."""
        need = self.prefill if role == "prefill" else self.decode
        return need / instances if instances > 0 else float("inf")

    def numbers(self, prefills: int, decodes: int) -> dict[str, Any]:
        return {
            "arrivals_per_s": round(self.rate, 3),
            "prompt_tokens_mean": round(self.prompt_mean, 1),
            "output_tokens_mean": round(self.output_mean, 1),
            "prefills_needed": round(self.prefill, 2),
            "decodes_needed": round(self.decode, 2),
            "prefills_for_queue": round(self.prefill_queued, 2),
            "decodes_for_queue": round(self.decode_queued, 2),
            "prefill_share": round(self.share("prefill", prefills), 3),
            "decode_share": round(self.share("decode", decodes), 3),
            "capacity": self.source,
        }


class ArrivalSample(Protocol):
    """What the demand reads of a sample (read-only: autopilot's Sample is frozen)."""

    @property
    def ts(self) -> float: ...
    @property
    def arrivals_per_s(self) -> float | None: ...
    @property
    def prompt_tokens_per_s(self) -> float | None: ...
    @property
    def output_tokens_per_s(self) -> float | None: ...
    @property
    def prefill_waiting(self) -> int: ...
    @property
    def decode_waiting(self) -> int: ...


def window_demand(
    samples: Sequence[ArrivalSample],
    capacity: Capacity | None,
    span_s: float,
    clear_s: float,
) -> Demand | None:
    """The arrivals of the last `span_s` (and the newest sample's queues, cleared within
    `clear_s`) as instances of each role, or None: no capacity model, no arrival counts, or
    fewer than MIN_ARRIVALS requests."""
    if capacity is None or not samples:
        return None
    newest = samples[-1]
    samples = [s for s in samples if s.ts >= newest.ts - span_s]
    rows = [
        (s.arrivals_per_s, s.prompt_tokens_per_s, s.output_tokens_per_s)
        for s in samples
        if s.arrivals_per_s is not None
        and s.prompt_tokens_per_s is not None
        and s.output_tokens_per_s is not None
    ]
    if not rows:
        return None
    rate = sum(r[0] for r in rows) / len(rows)
    if rate <= 0 or rate * span_s < MIN_ARRIVALS:
        return None
    prompt = sum(r[1] for r in rows) / len(rows) / rate
    output = sum(r[2] for r in rows) / len(rows) / rate
    per_prefill = capacity.prefill_seconds(prompt)
    per_decode = capacity.decode_seconds(prompt, output)
    p_queue = newest.prefill_waiting * per_prefill / clear_s
    d_queue = newest.decode_waiting * per_decode / clear_s
    return Demand(
        rate,
        prompt,
        output,
        rate * per_prefill + p_queue,
        rate * per_decode + d_queue,
        capacity.source,
        p_queue,
        d_queue,
    )


def short_role(demand: Demand, prefills: int, decodes: int, high: float) -> str | None:
    """`prefill` or `decode` when that role needs more than `high` of what it has and giving
    it one instance of the other lowers the larger need and leaves the other within `high`;
    else None."""
    p, d = demand.share("prefill", prefills), demand.share("decode", decodes)
    if p > high and p >= d:
        after = (demand.share("prefill", prefills + 1), demand.share("decode", decodes - 1))
        return "prefill" if after[1] <= high and max(after) < p else None
    if d > high:
        after = (demand.share("prefill", prefills - 1), demand.share("decode", decodes + 1))
        return "decode" if after[0] <= high and max(after) < d else None
    return None


def leaves_short(demand: Demand, source: str, have: int, high: float) -> bool:
    """Would taking one instance from `source` (of `have`) leave it needing more than `high`?"""
    return demand.share(source, have - 1) > high
