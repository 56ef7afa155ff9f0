"""A request as the stand-in engine's scheduler sees it, and its compact token timeline."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from domain.measures.slo import ITL_STATS, itl_statistic, percentile


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, or preempted and waiting to recompute
    WAITING_FOR_KV = "waiting_for_kv"  # decode role: blocks allocated, KV still in flight
    RUNNING = "running"
    HELD = "held"  # prefill role: finished, blocks kept until the decode takes them
    FINISHED = "finished"


class KVRole(enum.Enum):
    """What the request's KV cache does beyond this engine (vLLM's kv_transfer_params)."""

    LOCAL = "local"  # colocated: compute the prompt, decode here
    REMOTE_DECODE = "remote_decode"  # prefill leg: compute the prompt, hold KV for a decode
    REMOTE_PREFILL = "remote_prefill"  # decode leg: KV arrives from a prefill engine


class TokenTimeline:
    """Output-token times kept as runs [first, last, count] of near-equal gaps.

    A steady decode produces one run however many tokens it has; a gap that differs from
    the run's mean by more than the tolerance starts a new run. First and last times of
    every run are exact; gaps inside a run are their mean (error below the tolerance).
    """

    __slots__ = ("runs",)
    REL_TOL = 0.002
    ABS_TOL = 1e-5

    def __init__(self) -> None:
        self.runs: list[list[float]] = []

    def add(self, t: float) -> None:
        self.add_run(t, t, 1)

    def add_run(self, first: float, last: float, count: int) -> None:
        """Append `count` tokens evenly spaced from `first` to `last`."""
        if count <= 0:
            return
        runs = self.runs
        if runs:
            run = runs[-1]
            gap = first - run[1]
            inner = (last - first) / (count - 1) if count > 1 else gap
            if run[2] == 1 and (count == 1 or abs(inner - gap) <= self._tol(gap)):
                run[1], run[2] = last, 1 + count
                return
            if run[2] > 1:
                mean = (run[1] - run[0]) / (run[2] - 1)
                tol = self._tol(mean)
                if abs(gap - mean) <= tol and (count == 1 or abs(inner - mean) <= tol):
                    run[1] = last
                    run[2] += count
                    return
        runs.append([first, last, count])

    def _tol(self, gap: float) -> float:
        return max(self.ABS_TOL, self.REL_TOL * abs(gap))

    @property
    def count(self) -> int:
        return int(sum(r[2] for r in self.runs))

    @property
    def first(self) -> float | None:
        return self.runs[0][0] if self.runs else None

    @property
    def last(self) -> float | None:
        return self.runs[-1][1] if self.runs else None

    def gaps(self) -> list[tuple[float, int]]:
        """Inter-token gaps as (gap, how many times it occurs)."""
        out: list[tuple[float, int]] = []
        prev_last: float | None = None
        for first, last, count in self.runs:
            if prev_last is not None:
                out.append((first - prev_last, 1))
            if count > 1:
                out.append(((last - first) / (count - 1), int(count - 1)))
            prev_last = last
        return out

    def times(self) -> list[float]:
        """Every token time (expanded; for tests and small requests)."""
        out: list[float] = []
        for first, last, count in self.runs:
            n = int(count)
            step = (last - first) / (n - 1) if n > 1 else 0.0
            out.extend(first + i * step for i in range(n))
        return out


def gap_stat(gaps: list[tuple[float, int]], stat: str) -> float | None:
    """A per-request ITL statistic over runs of equal gaps (gap, count): mean, max, p99 as
    the SLO judges them (domain/measures/slo.py), or any pNN by the same percentile."""
    values, counts = [g for g, _ in gaps], [n for _, n in gaps]
    if stat in ITL_STATS:
        return itl_statistic(values, stat, counts)
    if stat.startswith("p") and stat[1:].replace(".", "", 1).isdigit():
        return percentile(values, float(stat[1:]), counts)
    raise ValueError(f"unknown ITL statistic {stat!r}")


@dataclass(slots=True, eq=False)
class EngineRequest:
    """One request inside an engine. Times are on the engine's clock (virtual or wall)."""

    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    arrival_time: float
    kv_role: KVRole = KVRole.LOCAL
    # Output length at which the request stops on its own (EOS); None: only max_tokens.
    stop_after: int | None = None

    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache
    num_external_tokens: int = 0  # prompt tokens that arrived by KV transfer
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[int] | None = None
    preemptions: int = 0
    kv_ready: bool = False
    scheduled_time: float | None = None  # first time it got a slot (queue time ends)
    first_token_time: float | None = None
    finish_time: float | None = None
    finish_reason: str | None = None  # length | stop | abort | error
    kv_hold_deadline: float | None = None
    # Decode leg with bidirectional KV (simulator/kv/pullback.py): keep the blocks this long
    # after finishing, for the conversation's next prefill to pull back.
    keep_kv_s: float | None = None
    # a decode's KV transfer on the engine's clock: (waited from, ready at, modelled seconds)
    kv_transfer: tuple[float, float, float] | None = None
    # Decode leg: CRC-32 of the KV bytes received XOR of the bytes a correct transfer
    # carries (0: correct, or no transfer); it seeds the output (simulator/server/app.py)
    kv_seed_delta: int = 0
    timeline: TokenTimeline = field(default_factory=TokenTimeline)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        """Tokens whose KV must exist before the next token can be sampled."""
        return self.prompt_len + self.num_output_tokens

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed_tokens < self.num_tokens - 1

    @property
    def is_finished(self) -> bool:
        """Done generating (a prefill leg holding its KV counts as done)."""
        return self.status is RequestStatus.FINISHED or self.status is RequestStatus.HELD

    @property
    def output_limit(self) -> int:
        return self.max_tokens if self.stop_after is None else min(self.max_tokens, self.stop_after)

    def ttft(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    def itl_stat(self, stat: str) -> float | None:
        return gap_stat(self.timeline.gaps(), stat)


def kv_transfer_stats(req: EngineRequest, time_scale: float = 1.0) -> dict[str, float] | None:
    """A decode's own figures for its KV transfer, in wall seconds, for its response's
    `kv_transfer_stats` field (pdctl's proxy splits the decode's wait with them): how long it
    waited for its KV (blocks allocated to KV usable; in write mode this spans the prefill),
    the modelled transfer itself, and KV usable to its first token (its first decode step,
    queue included). None when no KV arrived by transfer."""
    if req.kv_transfer is None or req.first_token_time is None:
        return None
    since, ready, xfer = req.kv_transfer
    return {
        "kv_wait_s": (ready - since) * time_scale,
        "xfer_time_s": xfer * time_scale,
        "ready_to_first_token_s": max(0.0, req.first_token_time - ready) * time_scale,
    }


def per_request_metrics(req: EngineRequest, time_scale: float = 1.0) -> dict[str, float | None]:
    """vLLM 0.32's per-request timing (`--enable-per-request-metrics`, its
    build_per_request_timing_metrics): TTFT from scheduling (queue time apart), generation
    from first to last token, mean ITL over the gaps, tokens per second from scheduling on;
    each None when a time it needs is missing. Milliseconds on the wall clock."""
    scheduled, first, last = req.scheduled_time, req.first_token_time, req.finish_time
    n = req.num_output_tokens

    def ms(later: float | None, earlier: float | None) -> float | None:
        if later is None or earlier is None:
            return None
        return (later - earlier) * time_scale * 1000

    inference_ms = ms(last, scheduled)
    gen_ms = ms(last, first)
    return {
        "time_to_first_token_ms": ms(first, scheduled),
        "generation_time_ms": gen_ms,
        "queue_time_ms": ms(scheduled, req.arrival_time),
        "mean_itl_ms": gen_ms / (n - 1) if gen_ms is not None and n > 1 else None,
        "tokens_per_second": n / inference_ms * 1000 if inference_ms else None,
        "speculative_decoding": None,
    }
