"""A whole deployment on the virtual clock: several engines behind a proxy, no sockets.

Colocated: the proxy balances whole requests round-robin over the engines. Disaggregated:
each request's prefill leg goes to a prefill engine and its decode leg to a decode engine
(round-robin each); the KV moves in the hand-off model's time (simulator/model/handoff.py;
bandwidth only when the cluster has no `handoff`) over that pair's link (`pair_links`: inside
a node or between nodes). Read mode: the decode leg is sent
when the prefill answers, the decode allocates blocks, then pulls. Write mode: both legs
are sent at arrival; the prefill pushes layer by layer as it computes, so the KV is ready
at the later of (decode blocks allocated + transfer) and (prefill done + one layer's share).

The decode notices a landed KV only between its own steps, as vLLM polls get_finished once
per engine step: a request whose KV lands mid-step joins the step after it.

Engines step in time order; an engine jumps over steady decode stretches only up to the
next moment anything could reach it (an arrival, a KV landing, another engine's step).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from domain.modes import TRANSFER_MODES
from simulator.engine.request import EngineRequest, KVRole, gap_stat
from simulator.engine.scheduler import Scheduler, StepOutput
from simulator.model.handoff import HandoffLink
from simulator.model.timing import kv_transfer_seconds


@dataclass(slots=True)
class Arrival:
    """One client request: when it arrives, its prompt and how many tokens it wants."""

    request_id: str
    at: float
    prompt_token_ids: list[int]
    max_tokens: int


@dataclass(slots=True)
class RequestResult:
    request_id: str
    arrival: float
    ttft: float | None
    itl_gaps: list[tuple[float, int]]
    e2e: float | None
    output_tokens: int
    prefill_s: float | None = None  # prefill leg: arrival -> prefill's token
    transfer_s: float | None = None  # modelled KV transfer

    def itl(self, stat: str) -> float | None:
        return gap_stat(self.itl_gaps, stat)


@dataclass(slots=True)
class _Pair:
    arrival: Arrival
    prefill: EngineRequest
    decode: EngineRequest
    decode_engine: int
    prefill_engine: int = 0
    prefill_done: float | None = None
    blocks_at: float | None = None
    transfer_s: float = 0.0
    scheduled: bool = False


@dataclass
class Cluster:
    """Engines plus what the proxy does between them."""

    prefills: list[Scheduler] = field(default_factory=list)
    decodes: list[Scheduler] = field(default_factory=list)
    colocated: list[Scheduler] = field(default_factory=list)
    mode: str = "read"  # read | write (disaggregated only)
    link_bytes_per_s: float = 50e9
    link_latency_s: float = 0.0002
    handoff: HandoffLink | None = None  # the hand-off model; None: latency + bytes / link
    # Per prefill and decode engine ([p][d]), when pairs differ (some across nodes, some
    # inside one): the link each pair's hand-off takes. None: `handoff` for every pair.
    pair_links: list[list[HandoffLink]] | None = None

    def transfer_seconds(
        self, decode: Scheduler, prompt_len: int, pair: tuple[int, int] | None = None
    ) -> float:
        """The modelled hand-off of a prompt's KV (all but its last token) to `decode`, from
        prefill engine pair[0] to decode engine pair[1]."""
        model = decode.timing.model
        if self.pair_links is not None and pair is not None:
            link = self.pair_links[pair[0]][pair[1]]
            return link.transfer_seconds(model, prompt_len - 1, decode.config.block_size)
        if self.handoff is None:
            return kv_transfer_seconds(
                prompt_len - 1, model, self.link_bytes_per_s, self.link_latency_s
            )
        return self.handoff.transfer_seconds(model, prompt_len - 1, decode.config.block_size)

    def run(self, arrivals: list[Arrival], until: float = math.inf) -> list[RequestResult]:
        if self.colocated:
            return _Run(self, arrivals).colocated(until)
        if not self.prefills or not self.decodes:
            raise ValueError("a disaggregated cluster needs prefill and decode engines")
        if self.mode not in TRANSFER_MODES:
            raise ValueError(f"unknown mode {self.mode!r}")
        return _Run(self, arrivals).disaggregated(until)


class _Run:
    def __init__(self, cluster: Cluster, arrivals: list[Arrival]) -> None:
        self.c = cluster
        self.arrivals = sorted(arrivals, key=lambda a: a.at)
        self.events: list[tuple[float, int, str, object]] = []
        self._seq = 0

    def _push(self, at: float, kind: str, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self.events, (at, self._seq, kind, payload))

    # ---- the shared event loop ---------------------------------------------------------

    def _touch(self, k: int, now: float) -> None:
        """Work reached engine k at `now`: an idle engine cannot step before that, and one
        that found nothing computable (asleep until its fallback wake-up) steps at once."""
        if k in self.asleep:
            self.clock[k] = max(self.asleep.pop(k), now)
        else:
            self.clock[k] = max(self.clock[k], now)

    def _loop(
        self,
        engines: list[Scheduler],
        on_event,
        on_step,
        until: float,
        upstream: dict[int, list[int]] | None = None,
    ) -> None:
        """Step engines in time order. `upstream[k]`: engines whose steps can send engine k
        work (a decode's prefills); k may jump only up to their next step."""
        self.clock = clock = [0.0] * len(engines)  # when each engine may start its next step
        # Engines whose last step found nothing computable, with when they became free: work
        # reaching one (`_touch`) wakes it then, not at its fallback wake-up.
        self.asleep: dict[int, float] = {}
        i = 0
        while True:
            next_arrival = self.arrivals[i].at if i < len(self.arrivals) else math.inf
            next_event = self.events[0][0] if self.events else math.inf
            busy = [(clock[k], k) for k, e in enumerate(engines) if e.has_work]
            next_step, k = min(busy) if busy else (math.inf, -1)
            now = min(next_arrival, next_event, next_step)
            if now == math.inf or now >= until:
                return
            if next_arrival == now:
                on_event(now, "arrival", self.arrivals[i])
                i += 1
                continue
            if next_event == now:
                at, _, kind, payload = heapq.heappop(self.events)
                on_event(at, kind, payload)
                continue
            engine = engines[k]
            start = max(clock[k], now)
            feeders = (upstream or {}).get(k, ())
            others = [clock[j] for j in feeders if engines[j].has_work]
            horizon = min(next_arrival, next_event, min(others, default=math.inf), until)
            steps = engine.steady_steps(start, horizon)
            out = engine.advance_steady(start, steps) if steps else engine.step(start)
            on_step(k, out)
            if out.steps == 0:
                # Nothing computable (decode legs waiting for KV): sleep until work reaches
                # it, or at the latest the next arrival or event.
                self.asleep[k] = start
                clock[k] = min(
                    next_arrival,
                    next_event if self.events else math.inf,
                    self.events[0][0] if self.events else math.inf,
                )
                continue  # at infinity it waits for a `_touch`; none left ends the loop
            self.asleep.pop(k, None)
            clock[k] = out.end

    # ---- colocated ----------------------------------------------------------------------

    def colocated(self, until: float) -> list[RequestResult]:
        engines = self.c.colocated
        placed: list[EngineRequest] = []
        turn = [0]

        def on_event(now: float, kind: str, arrival: Arrival) -> None:
            k = turn[0] % len(engines)
            turn[0] += 1
            req = EngineRequest(
                arrival.request_id, arrival.prompt_token_ids, arrival.max_tokens, now
            )
            engines[k].add_request(req)
            placed.append(req)
            self._touch(k, now)

        self._loop(engines, on_event, lambda k, out: None, until)
        return [_result(r) for r in placed]

    # ---- disaggregated ------------------------------------------------------------------

    def disaggregated(self, until: float) -> list[RequestResult]:
        c = self.c
        engines = [*c.prefills, *c.decodes]
        n_prefill = len(c.prefills)
        pairs: dict[str, _Pair] = {}
        turn = {"p": 0, "d": 0}

        def submit_decode(pair: _Pair, now: float) -> None:
            pair.decode.arrival_time = now
            c.decodes[pair.decode_engine].add_request(pair.decode)
            self._touch(n_prefill + pair.decode_engine, now)

        def on_event(now: float, kind: str, payload) -> None:
            if kind == "arrival":
                a: Arrival = payload
                p = turn["p"] % n_prefill
                d = turn["d"] % len(c.decodes)
                turn["p"] += 1
                turn["d"] += 1
                prefill = EngineRequest(
                    a.request_id, a.prompt_token_ids, 1, now, kv_role=KVRole.REMOTE_DECODE
                )
                decode = EngineRequest(
                    a.request_id,
                    a.prompt_token_ids,
                    a.max_tokens,
                    now,
                    kv_role=KVRole.REMOTE_PREFILL,
                )
                pair = _Pair(a, prefill, decode, d, p)
                pairs[a.request_id] = pair
                c.prefills[p].add_request(prefill)
                self._touch(p, now)
                if c.mode == "write":
                    submit_decode(pair, now)
            elif kind == "decode_leg":
                submit_decode(payload, now)
            elif kind == "kv_ready":
                pair = payload
                c.decodes[pair.decode_engine].kv_arrived(pair.decode.request_id, True, False)
                self._touch(n_prefill + pair.decode_engine, now)

        def maybe_schedule_kv(pair: _Pair) -> None:
            if pair.scheduled or pair.prefill_done is None or pair.blocks_at is None:
                return
            decode = c.decodes[pair.decode_engine]
            model = decode.timing.model
            pair.transfer_s = c.transfer_seconds(
                decode,
                len(pair.arrival.prompt_token_ids),
                (pair.prefill_engine, pair.decode_engine),
            )
            if c.mode == "write":
                ready = max(
                    pair.blocks_at + pair.transfer_s,
                    pair.prefill_done + pair.transfer_s / model.layers,
                )
            else:
                ready = max(pair.blocks_at, pair.prefill_done) + pair.transfer_s
            pair.scheduled = True
            self._push(ready, "kv_ready", pair)

        def on_step(k: int, out: StepOutput) -> None:
            if k < n_prefill:
                for req in out.finished:
                    pair = pairs[req.request_id]
                    pair.prefill_done = out.end
                    c.prefills[k].release_kv(req.request_id)  # blocks go with the transfer
                    if c.mode == "read":
                        self._push(out.end, "decode_leg", pair)
                    maybe_schedule_kv(pair)
            else:
                for req in out.awaiting_kv:
                    pair = pairs[req.request_id]
                    pair.blocks_at = out.start
                    maybe_schedule_kv(pair)

        feeders = list(range(n_prefill))
        upstream = {n_prefill + d: feeders for d in range(len(c.decodes))}
        self._loop(engines, on_event, on_step, until, upstream)
        results = []
        for pair in pairs.values():
            r = _result(pair.decode, arrival=pair.arrival.at)
            if pair.prefill.first_token_time is not None:
                r.prefill_s = pair.prefill.first_token_time - pair.arrival.at
            r.transfer_s = pair.transfer_s
            results.append(r)
        return results


def _result(req: EngineRequest, arrival: float | None = None) -> RequestResult:
    start = req.arrival_time if arrival is None else arrival
    ttft = None if req.first_token_time is None else req.first_token_time - start
    e2e = None if req.finish_time is None else req.finish_time - start
    return RequestResult(
        req.request_id, start, ttft, req.timeline.gaps(), e2e, req.num_output_tokens
    )
