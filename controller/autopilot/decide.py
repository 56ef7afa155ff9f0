"""The P:D ratio autopilot's decision (pure): from the samples of the last `window_s` and what
it did before, move one decode to prefill, one prefill to decode, or nothing.

A sample is the 10 s frame (observe/frames.py) reduced to the numbers that matter here:
  TTFT-bound  the prefills' waiting queue over `prefill_waiting_per_instance` each, or TTFT
              p90 over its SLO while the decodes are not saturated, and ITL is fine
  ITL-bound   ITL p90 over its SLO, the decodes saturated (running + waiting >= 90% of
              their max_num_seqs), or decode KV usage over `kv_usage_high`, and TTFT is fine
Both or neither: nothing. A move needs a whole window bound the same way: no sample fine,
both or bound the other way (hysteresis: one such sample moves nothing), at least half bound
(a sample with no answer and no queue says nothing), and the window's SLO attainment below
`attainment_target`. Guard rails, in order: nothing while a move, switch or restart runs; a
cooldown since the last move; a budget of moves per hour; each role keeps `min_per_role`.
Dry-run decisions count as moves for the rails, so a dry run records what a live one does.

Evidence (domain/measures/evidence.py): a move (or a held one) is not decided from a window a change
disturbed (a sample whose frame marks a rollout in it or its settling: a switch's held
requests are not the workload) or from fewer than MIN_REAL_REQUESTS real requests in the
window (pdctl's canaries are never counted): the decision is none, "not enough evidence
(why)". A move the arrivals lead keeps its own minimum (MIN_ARRIVALS): it is made before the
requests finish, which is its point.

Leading (`lead_from_arrivals`, controller/autopilot/demand.py): where a capacity model of the
deployment exists, the window's arrivals say what each role must give; a role they outrun,
while the other could spare one, moves one instance at once, without waiting for the backlog
(and whatever the attainment: it can only fall). A backlog-led move that the arrivals say
would leave its source short is not made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from controller.autopilot.capacity import group_max_num_seqs
from controller.autopilot.demand import (
    Capacity,
    Demand,
    leaves_short,
    short_role,
    window_demand,
)
from controller.spec.deployment import DeploymentSpec
from controller.spec.sections.autopilot import Autopilot
from domain.measures.evidence import MIN_REAL_REQUESTS, not_enough

HOUR_S = 3600.0
SAMPLE_GAP_S = 2.0  # the oldest sample may be this much younger than the window start
SATURATED = 0.9  # of the decodes' sequences running
SAMPLE_WINDOW_S = 10.0  # each sample is the 10 s frame
TTFT, ITL, BOTH, FINE, IDLE = "ttft", "itl", "both", "fine", "idle"


@dataclass(frozen=True, slots=True)
class Sample:
    ts: float
    requests: float  # first tokens in the 10 s window (0: idle, no signal)
    slo_attainment: float | None
    ttft_p90_s: float | None
    itl_p90_s: float | None
    slo_ttft_s: float | None
    slo_itl_s: float | None
    prefills: int
    decodes: int
    prefill_waiting: int
    decode_running: int
    decode_waiting: int  # requests waiting for their KV count here too: a number, no signal
    decode_kv_usage: float | None  # max over decodes, 0..1
    decode_slots: int = 0  # max_num_seqs summed over the decodes (0: unknown)
    # Client requests arriving at the proxy and the tokens they bring (frame["arrivals"])
    arrivals_per_s: float | None = None
    prompt_tokens_per_s: float | None = None
    output_tokens_per_s: float | None = None
    # Evidence (frame["evidence"]): client requests the proxy counted in the 10 s window, every
    # outcome, canaries never (None: not marked; `requests` stands for it), and why the window
    # is disturbed by a change (None: it is not)
    real_requests: float | None = None
    disturbed: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    kind: str  # move | held | none
    why: str
    bound: str | None = None  # ttft | itl
    instance: str | None = None
    source: str | None = None
    target: str | None = None
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def instance_slots(spec: DeploymentSpec) -> dict[str, int]:
    """Each instance's max_num_seqs (where its group sets none, vLLM's default on the spec's
    hardware: controller/autopilot/capacity.py)."""
    seqs = {g.name: group_max_num_seqs(spec, g) for g in spec.groups}
    return {f"{g.name}-{i}": seqs[g.name] for g in spec.groups for i in range(g.count)}


def sample(frame: Mapping[str, Any], ts: float, slots: Mapping[str, int] | None = None) -> Sample:
    """One 10 s frame's numbers, per serving role (the instance rows name it); `slots`: each
    instance's max_num_seqs."""
    rows = frame.get("instances") or []
    pre = [r for r in rows if r.get("role") == "prefill"]
    dec = [r for r in rows if r.get("role") == "decode"]
    slo = frame.get("slo") or {}
    kv = [r["kv_cache_usage"] for r in dec if r.get("kv_cache_usage") is not None]
    arrivals = frame.get("arrivals") or {}
    evidence = frame.get("evidence") or {}
    return Sample(
        ts=ts,
        requests=float((frame.get("ttft") or {}).get("count") or 0.0),
        slo_attainment=frame.get("slo_attainment"),
        ttft_p90_s=(frame.get("ttft") or {}).get("p90"),
        itl_p90_s=(frame.get("itl") or {}).get("p90"),
        slo_ttft_s=_s(slo.get("ttft_ms")),
        slo_itl_s=_s(slo.get("itl_ms")),
        prefills=len(pre),
        decodes=len(dec),
        prefill_waiting=sum(r.get("waiting") or 0 for r in pre),
        decode_running=sum(r.get("running") or 0 for r in dec),
        decode_waiting=sum(r.get("waiting") or 0 for r in dec),
        decode_kv_usage=max(kv) if kv else None,
        decode_slots=sum((slots or {}).get(r.get("name"), 0) for r in dec),
        arrivals_per_s=arrivals.get("per_s"),
        prompt_tokens_per_s=arrivals.get("prompt_tokens_per_s"),
        output_tokens_per_s=arrivals.get("output_tokens_per_s"),
        real_requests=evidence.get("real_requests"),
        disturbed=evidence.get("why") if evidence.get("disturbed") else None,
    )


def _s(ms: float | None) -> float | None:
    return ms / 1000.0 if ms is not None else None


def _over(value: float | None, line: float | None) -> bool:
    return value is not None and line is not None and value > line


def pressure(s: Sample, ap: Autopilot) -> tuple[bool, bool]:
    """(TTFT pressure, ITL pressure) of one sample. Where the requests pile up says where the
    shortage is: a TTFT over its line counts for prefill only while the decodes are not
    saturated (a first token late because the decodes are full is the decodes' shortage)."""
    queue = s.prefill_waiting >= ap.prefill_waiting_per_instance * max(s.prefills, 1)
    full = saturated(s)
    ttft = queue or (_over(s.ttft_p90_s, s.slo_ttft_s) and not full)
    itl = (
        _over(s.itl_p90_s, s.slo_itl_s)
        or full
        or (s.decode_kv_usage is not None and s.decode_kv_usage >= ap.kv_usage_high)
    )
    return ttft, itl


def saturated(s: Sample) -> bool:
    """More requests at the decodes (running, or waiting: for a slot or their KV) than 90% of
    the sequences they may run: new requests queue behind them. Requests finish in bursts, so
    the running count alone dips below the line while dozens wait."""
    demand = s.decode_running + s.decode_waiting
    return s.decode_slots > 0 and demand >= SATURATED * s.decode_slots


def classify(s: Sample, ap: Autopilot) -> str:
    """ttft or itl when exactly one side is under pressure; both; fine (requests met every
    line); idle (no request answered in the 10 s and no queue: no signal either way)."""
    ttft, itl = pressure(s, ap)
    if ttft and itl:
        return BOTH
    if ttft or itl:
        return TTFT if ttft else ITL
    return FINE if s.requests > 0 else IDLE


def bound(s: Sample, ap: Autopilot) -> str | None:
    """ttft or itl when exactly one side is under pressure, else None."""
    kind = classify(s, ap)
    return kind if kind in (TTFT, ITL) else None


def window_numbers(samples: Sequence[Sample], ap: Autopilot) -> dict[str, Any]:
    """What drove the decision, over the window's samples."""
    if not samples:
        return {"samples": 0}

    def worst(values, pick=max):
        kept = [v for v in values if v is not None]
        return round(pick(kept), 4) if kept else None

    att = [s.slo_attainment for s in samples if s.slo_attainment is not None]
    bounds = [bound(s, ap) for s in samples]
    last = samples[-1]
    return {
        "samples": len(samples),
        "span_s": round(samples[-1].ts - samples[0].ts, 1),
        "ttft_bound_samples": bounds.count(TTFT),
        "itl_bound_samples": bounds.count(ITL),
        "slo_attainment_mean": round(sum(att) / len(att), 4) if att else None,
        "ttft_p90_s_min": worst((s.ttft_p90_s for s in samples), min),
        "ttft_p90_s_max": worst(s.ttft_p90_s for s in samples),
        "itl_p90_s_min": worst((s.itl_p90_s for s in samples), min),
        "itl_p90_s_max": worst(s.itl_p90_s for s in samples),
        "slo_ttft_s": last.slo_ttft_s,
        "slo_itl_s": last.slo_itl_s,
        "prefill_waiting_min": min(s.prefill_waiting for s in samples),
        "decode_waiting_min": min(s.decode_waiting for s in samples),
        "decode_running_min": min(s.decode_running for s in samples),
        "decode_slots": last.decode_slots,
        "decode_kv_usage_min": worst((s.decode_kv_usage for s in samples), min),
        "prefills": last.prefills,
        "decodes": last.decodes,
    }


def covered(inside: Sequence[Sample], ap: Autopilot, now: float) -> bool:
    """Do the window's samples reach back to its start?"""
    return bool(inside) and inside[0].ts <= now - ap.window_s + SAMPLE_GAP_S


def held_bound(samples: Sequence[Sample], ap: Autopilot, now: float) -> str | None:
    """The bound the whole last window agrees on, else None: no sample says otherwise (fine,
    both, the other bound), and at least half of them say it (idle ones say nothing)."""
    inside = [s for s in samples if s.ts >= now - ap.window_s]
    if not covered(inside, ap, now):
        return None
    kinds = [classify(s, ap) for s in inside]
    said = set(kinds) - {IDLE}
    if len(said) != 1 or kinds.count(next(iter(said))) * 2 < len(kinds):
        return None
    kind = said.pop()
    return kind if kind in (TTFT, ITL) else None


def decide(
    ap: Autopilot,
    samples: Sequence[Sample],
    roles: Mapping[str, str],
    moves: Sequence[float],
    now: float,
    busy: str | None = None,
    load: Mapping[str, int] | None = None,
    capacity: Capacity | None = None,
) -> Decision:
    """`roles`: each instance's serving role; `moves`: when earlier moves (dry-run ones too)
    were made; `busy`: why a change is under way (None: nothing runs); `load`: running
    requests per instance, to pick the one that drains fastest; `capacity`: the model of one
    instance per role (controller/autopilot/capacity.py; None: backlog signals only)."""
    d, led = _decide(ap, samples, roles, moves, now, busy, load, capacity)
    if d.kind == "none":
        return d
    why = evidence_lacking([s for s in samples if s.ts >= now - ap.window_s], ap, led)
    if why is None:
        return d
    return Decision(
        "none", f"{d.why}, not made: {why}", d.bound, None, d.source, d.target, d.numbers
    )


def evidence_lacking(inside: Sequence[Sample], ap: Autopilot, led: bool = False) -> str | None:
    """Why the window's samples are no evidence to move on ("not enough evidence (...)"), or
    None: a change disturbed one of them, or too few real requests came in the window. A
    move the arrivals lead has its own minimum (demand.py MIN_ARRIVALS over the lead span):
    it acts before the requests finish, which is its point."""
    disturbed = [s.disturbed for s in inside if s.disturbed]
    if disturbed:
        return disturbed[-1]  # the frame's own words, the newest
    if led:
        return None
    counts = [s.real_requests if s.real_requests is not None else s.requests for s in inside]
    span = max(ap.window_s, SAMPLE_WINDOW_S)  # a shorter window still reads a 10 s frame
    real = sum(counts) / len(counts) * span / SAMPLE_WINDOW_S if counts else 0.0
    if real < MIN_REAL_REQUESTS:
        return not_enough(
            f"about {real:.0f} real requests in the last {span:g} s, "
            f"{MIN_REAL_REQUESTS} needed; pdctl's own canaries and probes are not traffic"
        )
    return None


def _decide(
    ap: Autopilot,
    samples: Sequence[Sample],
    roles: Mapping[str, str],
    moves: Sequence[float],
    now: float,
    busy: str | None,
    load: Mapping[str, int] | None,
    capacity: Capacity | None,
) -> tuple[Decision, bool]:
    """The decision, and whether the arrivals led it."""
    inside = [s for s in samples if s.ts >= now - ap.window_s]
    numbers = window_numbers(inside, ap)
    have = {role: sum(1 for r in roles.values() if r == role) for role in ("prefill", "decode")}
    demand = None
    if ap.lead_from_arrivals and covered(inside, ap, now):
        span = min(ap.lead_window_s, ap.window_s)
        demand = window_demand(inside, capacity, span, ap.window_s)
    if demand is not None:
        numbers["demand"] = demand.numbers(have["prefill"], have["decode"])
    short = _led(ap, inside, demand, have)
    if short is not None and demand is not None:  # (_led names a role only from a demand)
        led = TTFT if short == "prefill" else ITL
        source = "decode" if short == "prefill" else "prefill"
        what = (
            f"the arrivals need {demand.prefill:.1f} prefills and {demand.decode:.1f} decodes, "
            f"{have['prefill']} and {have['decode']} serve: one {source} to {short}"
        )
        return _move(ap, roles, moves, now, busy, load, led, what, numbers), True
    kind = held_bound(samples, ap, now)
    if kind is None:
        return Decision("none", _no_bound_why(inside, ap, now), numbers=numbers), False
    att = numbers["slo_attainment_mean"]
    if att is not None and att >= ap.attainment_target:
        why = f"{kind}-bound but SLO attainment {att:.0%} meets {ap.attainment_target:.0%}"
        return Decision("none", why, bound=kind, numbers=numbers), False
    source, target = ("decode", "prefill") if kind == TTFT else ("prefill", "decode")
    what = f"{kind.upper()}-bound for {ap.window_s:g} s: one {source} to {target}"
    if demand is not None and leaves_short(demand, source, have[source], ap.demand_high):
        need = demand.prefill if source == "prefill" else demand.decode
        left = have[source] - 1
        why = f"{what}, not made: the arrivals need {need:.1f} {source}s, {left} would be left"
        return Decision("none", why, kind, None, source, target, numbers), False
    return _move(ap, roles, moves, now, busy, load, kind, what, numbers), False


def _led(
    ap: Autopilot, inside: Sequence[Sample], demand: Demand | None, have: Mapping[str, int]
) -> str | None:
    """The role the arrivals say is short now, unless the newest sample shows pressure on
    the role that would give it an instance (its own backlog first)."""
    if demand is None:
        return None
    short = short_role(demand, have["prefill"], have["decode"], ap.demand_high)
    if short is None:
        return None
    ttft, itl = pressure(inside[-1], ap)
    return None if (itl if short == "prefill" else ttft) else short


def _move(ap, roles, moves, now, busy, load, kind, what, numbers) -> Decision:
    source, target = ("decode", "prefill") if kind == TTFT else ("prefill", "decode")
    held = _rail(ap, roles, moves, now, busy, source)
    if held is not None:
        return Decision("held", f"{what}, held: {held}", kind, None, source, target, numbers)
    instance = _pick(roles, source, load or {})
    return Decision("move", what, kind, instance, source, target, numbers)


def _no_bound_why(inside: Sequence[Sample], ap: Autopilot, now: float) -> str:
    if not inside or inside[0].ts > now - ap.window_s + SAMPLE_GAP_S:
        return f"not {ap.window_s:g} s of samples yet"
    said = {classify(s, ap) for s in inside} - {IDLE}
    if not said & {TTFT, ITL}:
        return "neither TTFT- nor ITL-bound: " + (", ".join(sorted(said)) or "idle")
    return "the signal did not hold for the whole window"


def _rail(ap, roles, moves, now, busy, source) -> str | None:
    if busy:
        return busy
    if moves and now - max(moves) < ap.cooldown_s:
        return f"cooldown: last move {now - max(moves):.0f} s ago, {ap.cooldown_s:g} s needed"
    recent = [t for t in moves if now - t < HOUR_S]
    if len(recent) >= ap.max_moves_per_hour:
        return f"budget: {len(recent)} moves in the last hour, {ap.max_moves_per_hour} allowed"
    left = sum(1 for r in roles.values() if r == source) - 1
    if left < ap.min_per_role:
        return f"min_per_role: {source} would keep {left}, {ap.min_per_role} needed"
    return None


def _pick(roles: Mapping[str, str], source: str, load: Mapping[str, int]) -> str:
    """The least loaded instance serving `source`; ties: the last by name."""
    names = sorted((n for n, r in roles.items() if r == source), reverse=True)
    return min(names, key=lambda n: load.get(n, 0))
