"""Jumping over steady stretches on the virtual clock: when every running request only
decodes, nobody waits for admission and the blocks suffice, k steps run as one, with step
times growing linearly with context. The planner runs thousands of requests this way."""

from __future__ import annotations

import math

from simulator.engine.scheduler import Scheduler, StepOutput
from simulator.model.timing import StepBatch


def steady_steps(sched: Scheduler, now: float, horizon: float) -> int:
    """How many decode-only steps can run unchanged from `now`, all starting before
    `horizon`: nobody finishes early, nobody waits for admission, blocks suffice."""
    running = sched.running
    if not running or len(running) > sched.config.max_num_batched_tokens:
        return 0
    if sched.waiting and len(running) < sched.config.max_num_seqs:
        return 0  # someone may be admitted at the next step
    remaining = math.inf
    for req in running:
        if req.num_tokens - req.num_computed_tokens != 1:
            return 0
        remaining = min(remaining, req.output_limit - req.num_output_tokens)
    k = int(remaining)
    if k < 2:
        return 0
    k = min(k, _steps_blocks_allow(sched, k))
    if k < 2:
        return 0
    t0, slope = _steady_step_times(sched)
    span = horizon - now
    if math.isfinite(span):
        k = min(k, _steps_starting_before(t0, slope, span))
    return k if k >= 2 else 0


def _steps_blocks_allow(sched: Scheduler, k: int) -> int:
    bs, free = sched.config.block_size, sched.pool.num_free

    def need(steps: int) -> int:
        return sum(
            max(0, -(-(r.num_computed_tokens + steps) // bs) - len(r.block_ids))
            for r in sched.running
        )

    if need(k) <= free:
        return k
    lo, hi = 0, k  # need(lo) fits, need(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid) <= free:
            lo = mid
        else:
            hi = mid
    return lo


def _steady_step_times(sched: Scheduler) -> tuple[float, float]:
    seqs = len(sched.running)
    ctx = sum(r.num_computed_tokens for r in sched.running)
    t0 = sched.timing.decode_step_seconds(seqs, ctx)
    t1 = sched.timing.decode_step_seconds(seqs, ctx + seqs)
    return t0, t1 - t0


def advance_steady(sched: Scheduler, now: float, steps: int) -> StepOutput:
    """Run `steps` decode-only steps at once (see steady_steps); the batch stays fixed."""
    t0, slope = _steady_step_times(sched)
    duration = steps * t0 + slope * steps * (steps - 1) / 2
    end = now + duration
    seqs = len(sched.running)
    batch = StepBatch(
        decode_seqs=seqs, decode_ctx_tokens=sum(r.num_computed_tokens for r in sched.running)
    )
    out = StepOutput(now, end, steps, batch, list(sched.running), [], [], [], [])
    bs = sched.config.block_size
    first_token_at = now + t0
    counters = sched.counters
    counters.steps += steps
    counters.iteration_tokens[seqs] += steps
    counters.generation_tokens += seqs * steps
    for req in list(sched.running):
        req.num_computed_tokens += steps
        need = -(-req.num_computed_tokens // bs) - len(req.block_ids)
        if need > 0:
            req.block_ids.extend(sched.pool.allocate(need))
        req.num_output_tokens += steps
        req.timeline.add_run(first_token_at, end, steps)
        if req.num_output_tokens >= req.output_limit:
            reason = "length" if req.num_output_tokens >= req.max_tokens else "stop"
            sched.running.remove(req)
            sched.finish_or_hold(req, end, reason)  # a decode with a lease keeps its blocks
            out.finished.append(req)
    return out


def _steps_starting_before(t0: float, slope: float, span: float) -> int:
    """Largest k with every step j < k starting before `span`: j*t0 + slope*j*(j-1)/2 < span."""
    if span <= 0:
        return 0
    if abs(slope) < 1e-15:
        return math.ceil(span / t0) if t0 > 0 else 1 << 30
    # Solve slope/2 j^2 + (t0 - slope/2) j - span = 0 for the largest starting step index.
    a, b = slope / 2, t0 - slope / 2
    j = (-b + math.sqrt(b * b + 4 * a * span)) / (2 * a)
    k = math.ceil(j)
    while k > 0 and (k - 1) * t0 + slope * (k - 1) * (k - 2) / 2 >= span:
        k -= 1
    return k
