"""A continuous-batching scheduler modelled on vLLM v1, on an injected clock.

Each step: running requests first (decodes take one token, unfinished prefills take a
chunk), preempting the newest running request when KV blocks run out; then waiting
requests, oldest first, while slots (`max_num_seqs`), the token budget
(`max_num_batched_tokens`) and blocks allow. The step's duration comes from the timing
model; tokens appear at the end of the step. The caller owns the clock: `step(now)` and
`advance_steady(now, horizon)` return what happened, and nothing here sleeps or reads time.

Roles follow vLLM's kv_transfer_params: a REMOTE_DECODE request (a prefill leg) emits one
token and holds its blocks until `release_kv` or its deadline; a REMOTE_PREFILL request
(a decode leg) gets blocks, waits for `kv_arrived`, then computes only the last prompt
token and decodes.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from simulator.engine.block_pool import BlockPool, prompt_block_hashes
from simulator.engine.request import EngineRequest, KVRole, RequestStatus
from simulator.model.timing import StepBatch, TimingModel, chunk_attention_pairs


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    num_gpu_blocks: int = 0  # 0: size the pool from the memory left after weights
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = 0.9
    # How long a prefill holds KV that no decode took (NIXL's abort timeout).
    kv_hold_timeout_s: float = 480.0


@dataclass(slots=True)
class EngineCounters:
    """Cumulative counters behind vLLM's /metrics."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    prompt_tokens_local_compute: int = 0
    prompt_tokens_cache_hit: int = 0
    prompt_tokens_external: int = 0
    kv_expired_requests: int = 0
    steps: int = 0
    finished: Counter = field(default_factory=Counter)  # by finish reason
    iteration_tokens: Counter = field(default_factory=Counter)  # tokens per step -> steps


@dataclass(slots=True)
class StepOutput:
    """What one step (or a run of identical steps) did, for the server and the metrics."""

    start: float
    end: float
    steps: int
    batch: StepBatch
    # Requests that got output tokens in this step (each got exactly `steps` tokens,
    # except a first token counts once); first_tokens is the subset that got their first.
    tokens: list[EngineRequest]
    first_tokens: list[EngineRequest]
    finished: list[EngineRequest]
    preempted: list[EngineRequest]
    # Decode legs that just got their blocks: their KV may now be sent or pulled.
    awaiting_kv: list[EngineRequest]


class Scheduler:
    def __init__(self, timing: TimingModel, config: SchedulerConfig | None = None) -> None:
        self.timing = timing
        self.config = config = config or SchedulerConfig()
        blocks = config.num_gpu_blocks or max(
            1, timing.kv_pool_tokens(config.gpu_memory_utilization) // config.block_size
        )
        self.pool = BlockPool(blocks, config.enable_prefix_caching)
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.awaiting_kv: dict[str, EngineRequest] = {}
        self.held: dict[str, EngineRequest] = {}
        self.requests: dict[str, EngineRequest] = {}
        self.counters = EngineCounters()
        self._new_awaiting: list[EngineRequest] = []

    # ---- requests in and out -------------------------------------------------------

    def add_request(self, request: EngineRequest) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        if request.prompt_len == 0:
            raise ValueError("prompt must have at least one token")
        self.requests[request.request_id] = request
        request.status = RequestStatus.WAITING
        if request.kv_role is KVRole.REMOTE_PREFILL and request.kv_ready:
            # KV already here (a test, or a planner that models the transfer elsewhere).
            request.num_computed_tokens = request.prompt_len - 1
            request.num_external_tokens = request.prompt_len - 1
        self.waiting.append(request)

    def abort(self, request_id: str, now: float) -> EngineRequest | None:
        """Stop a request wherever it is (client went away); frees its blocks."""
        req = self.requests.get(request_id)
        if req is None or req.is_finished:
            return None
        if req in self.running:
            self.running.remove(req)
        elif req.status is RequestStatus.WAITING:
            self.waiting.remove(req)
        self.awaiting_kv.pop(request_id, None)
        self.held.pop(request_id, None)
        self._finish(req, now, "abort", free=True)
        return req

    def kv_arrived(self, request_id: str, ok: bool, recompute_on_failure: bool) -> None:
        """A decode leg's KV transfer ended. On failure: recompute the prompt, or fail it."""
        req = self.awaiting_kv.pop(request_id, None)
        if req is None:
            return
        req.kv_ready = True
        if ok:
            req.num_computed_tokens = req.prompt_len - 1
            req.num_external_tokens = req.prompt_len - 1
        elif not recompute_on_failure:
            self._finish(req, None, "error", free=True)
            return
        else:
            req.num_computed_tokens = 0
        req.status = RequestStatus.WAITING
        self.waiting.appendleft(req)

    def release_kv(self, request_id: str) -> bool:
        """The decode took a prefill's KV: free the held blocks. False if unknown/expired."""
        req = self.held.pop(request_id, None)
        if req is None:
            return False
        self.pool.free(req.block_ids)
        req.block_ids = []
        req.status = RequestStatus.FINISHED
        return True

    def expire_held(self, now: float) -> list[EngineRequest]:
        expired = [
            r
            for r in self.held.values()
            if r.kv_hold_deadline is not None and r.kv_hold_deadline <= now
        ]
        for req in expired:
            self.release_kv(req.request_id)
            self.counters.kv_expired_requests += 1
        return expired

    def forget(self, request_id: str) -> None:
        """Drop a finished request's record (servers call this once they have answered). A
        prefill leg still holding its KV stays in `held` alone, until `release_kv` or its
        deadline: nothing else would ever drop it from `requests`."""
        req = self.requests.get(request_id)
        if req is not None and req.is_finished:
            del self.requests[request_id]

    # ---- state -----------------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def idle(self) -> bool:
        """Nothing queued, running, awaiting KV, or held for a decode (a role change waits)."""
        return not (self.running or self.waiting or self.awaiting_kv or self.held)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.awaiting_kv)

    @property
    def kv_cache_usage(self) -> float:
        return self.pool.usage

    # ---- one step ---------------------------------------------------------------------

    def step(self, now: float) -> StepOutput:
        """Schedule and run one engine step starting at `now`."""
        self._new_awaiting = []
        scheduled, preempted = self._schedule(now)
        batch = self._batch(scheduled)
        duration = self.timing.step_seconds(batch) if scheduled else 0.0
        end = now + duration
        out = StepOutput(
            now, end, 1 if scheduled else 0, batch, [], [], [], preempted, self._new_awaiting
        )
        if not scheduled:
            return out
        counters = self.counters
        counters.steps += 1
        counters.iteration_tokens[batch.tokens] += 1
        for req, num_new in scheduled:
            self._computed(req, num_new)
            if req.num_computed_tokens < req.num_tokens:
                continue  # a prefill chunk that did not reach the end of the prompt
            self._emit_token(req, end, out)
        return out

    def _schedule(self, now: float) -> tuple[list[tuple[EngineRequest, int]], list]:
        cfg, pool = self.config, self.pool
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[EngineRequest, int]] = []
        preempted: list[EngineRequest] = []
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            num_new = min(req.num_tokens - req.num_computed_tokens, budget)
            need = self._blocks_needed(req, req.num_computed_tokens + num_new)
            while not self._room(need):
                victim = self.running.pop()
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            else:
                req.block_ids.extend(pool.allocate(need))
                scheduled.append((req, num_new))
                budget -= num_new
                i += 1
        if preempted:
            return scheduled, preempted
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self.waiting[0]
            if req.kv_role is KVRole.REMOTE_PREFILL and not req.kv_ready:
                if not self._reserve_for_remote_kv(req):
                    break
                self.waiting.popleft()
                continue
            hits: list[int] = []
            if req.num_computed_tokens == 0 and not req.block_ids:
                hits = self._prefix_hits(req)
            computed = max(req.num_computed_tokens, len(hits) * cfg.block_size)
            num_new = min(req.num_tokens - computed, budget)
            need = self._blocks_needed(req, computed + num_new, len(hits))
            if not self._room(need, hits):
                if not self.running and not hits and need > pool.num_free:
                    # Nothing will ever free enough blocks: vLLM refuses such a prompt.
                    self.waiting.popleft()
                    self._finish(req, now, "error", free=True)
                    continue
                break
            self.waiting.popleft()
            if hits:
                pool.take(hits)
                req.block_ids = list(hits)
                req.num_cached_tokens = len(hits) * cfg.block_size
                req.num_computed_tokens = computed
            req.block_ids.extend(pool.allocate(need))
            req.status = RequestStatus.RUNNING
            if req.scheduled_time is None:
                req.scheduled_time = now
            self.running.append(req)
            scheduled.append((req, num_new))
            budget -= num_new
        return scheduled, preempted

    def _prefix_hits(self, req: EngineRequest) -> list[int]:
        if not self.config.enable_prefix_caching:
            return []
        if req.block_hashes is None:
            req.block_hashes = prompt_block_hashes(req.prompt_token_ids, self.config.block_size)
        hits = self.pool.find_cached(req.block_hashes)
        # At least the last prompt token must be computed to sample the first output.
        max_blocks = (req.num_tokens - 1) // self.config.block_size
        hits = hits[:max_blocks]
        if req.preemptions == 0:
            self.counters.prefix_cache_queries += req.prompt_len
            self.counters.prefix_cache_hits += len(hits) * self.config.block_size
        return hits

    def _reserve_for_remote_kv(self, req: EngineRequest) -> bool:
        need = self._blocks_needed(req, req.prompt_len)
        if not self._room(need):
            return False
        req.block_ids.extend(self.pool.allocate(need))
        req.status = RequestStatus.WAITING_FOR_KV
        self.awaiting_kv[req.request_id] = req
        self._new_awaiting.append(req)
        return True

    def _room(self, need: int, hits: list[int] | tuple = ()) -> bool:
        """Whether `need` blocks can be had, first freeing blocks decodes kept for a next turn
        (bidirectional KV), oldest first: a kept turn is only a saving, a request is work."""
        while not self.pool.can_allocate(need, hits):
            kept = [r for r in self.held.values() if r.keep_kv_s is not None]
            if not kept:
                return False
            self.release_kv(min(kept, key=lambda r: r.kv_hold_deadline or 0.0).request_id)
        return True

    def _blocks_needed(self, req: EngineRequest, tokens: int, extra_held: int = 0) -> int:
        have = len(req.block_ids) + extra_held
        return max(0, -(-tokens // self.config.block_size) - have)

    def _preempt(self, req: EngineRequest) -> None:
        # vLLM v1 preempts by recomputation: drop the KV, requeue at the front.
        self.pool.free(req.block_ids)
        req.block_ids = []
        req.num_computed_tokens = 0
        req.kv_ready = req.kv_role is not KVRole.REMOTE_PREFILL or req.kv_ready
        req.status = RequestStatus.WAITING
        req.preemptions += 1
        self.counters.preemptions += 1
        self.waiting.appendleft(req)

    def _batch(self, scheduled: list[tuple[EngineRequest, int]]) -> StepBatch:
        d_seqs = d_ctx = p_seqs = p_tok = p_ctx = p_pairs = 0
        for req, num_new in scheduled:
            start = req.num_computed_tokens
            if num_new == 1:
                d_seqs += 1
                d_ctx += start
            else:
                p_tok += num_new
                p_ctx += start
                p_pairs += chunk_attention_pairs(start, num_new)
                if start + num_new >= req.num_tokens:
                    p_seqs += 1
        return StepBatch(d_seqs, d_ctx, p_seqs, p_tok, p_ctx, p_pairs)

    def _computed(self, req: EngineRequest, num_new: int) -> None:
        before = req.num_computed_tokens
        req.num_computed_tokens = before + num_new
        if before < req.prompt_len and self.config.enable_prefix_caching:
            bs = self.config.block_size
            if req.block_hashes is None:
                req.block_hashes = prompt_block_hashes(req.prompt_token_ids, bs)
            full = min(req.num_computed_tokens, req.prompt_len) // bs
            for b in range(before // bs, full):
                self.pool.cache(req.block_ids[b], req.block_hashes[b])

    def _emit_token(self, req: EngineRequest, t: float, out: StepOutput) -> None:
        counters = self.counters
        req.num_output_tokens += 1
        req.timeline.add(t)
        out.tokens.append(req)
        counters.generation_tokens += 1
        if req.first_token_time is None:
            req.first_token_time = t
            out.first_tokens.append(req)
            counters.prompt_tokens += req.prompt_len
            counters.prompt_tokens_cache_hit += req.num_cached_tokens
            counters.prompt_tokens_external += req.num_external_tokens
            counters.prompt_tokens_local_compute += (
                req.prompt_len - req.num_cached_tokens - req.num_external_tokens
            )
        if req.num_output_tokens >= req.output_limit:
            reason = "length" if req.num_output_tokens >= req.max_tokens else "stop"
            self.running.remove(req)
            self.finish_or_hold(req, t, reason)
            out.finished.append(req)

    def finish_or_hold(self, req: EngineRequest, t: float, reason: str) -> None:
        """A prefill leg that ran to length holds its KV for its decode; a decode with a
        lease (bidirectional KV) for the next turn; anything else frees its blocks."""
        hold = req.kv_role is KVRole.REMOTE_DECODE and reason == "length"
        hold = hold or req.keep_kv_s is not None
        self._finish(req, t, reason, free=not hold)
        if hold:
            req.status = RequestStatus.HELD
            lease = self.config.kv_hold_timeout_s if req.keep_kv_s is None else req.keep_kv_s
            req.kv_hold_deadline = t + lease
            self.held[req.request_id] = req

    def _finish(self, req: EngineRequest, t: float | None, reason: str, free: bool) -> None:
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        req.finish_time = t
        self.counters.finished[reason] += 1
        if free:
            self.pool.free(req.block_ids)
            req.block_ids = []

    # ---- steady stretches (simulator/engine/steady.py) ------------------------------------------

    def steady_steps(self, now: float, horizon: float) -> int:
        """How many identical decode-only steps can run from `now` before `horizon`."""
        from simulator.engine.steady import steady_steps

        return steady_steps(self, now, horizon)

    def advance_steady(self, now: float, steps: int) -> StepOutput:
        """Run `steps` decode-only steps at once (see steady_steps)."""
        from simulator.engine.steady import advance_steady

        return advance_steady(self, now, steps)
