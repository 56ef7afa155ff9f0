"""Engine steps read off a bench's per-request records, with no engine metrics needed.

A streaming request's inter-token gap is one engine step as the client saw it: the step
computed one token for every running decode and, with chunked prefill, the prompts of the
requests whose first token came at its end. So each gap, with who was decoding at its middle
(their context: prompt plus tokens so far) and whose first token fell inside it, is one
observation of the step cost. A new request's first token reaches the client a little after
the decodes' tokens of the same step (its stream is written after theirs), so a first token
up to LATE_FIRST_S after a gap ends belongs to that gap. Pure: records in, observations out.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

# How late a first token may reach the client after the step that made it ended.
LATE_FIRST_S = 0.001


@dataclass(frozen=True, slots=True)
class StepObservation:
    """One engine step: its measured duration and what it computed."""

    seconds: float
    decode_seqs: float  # a mean over many steps where one observation stands for them
    ctx_tokens: float
    prefill_tokens: float


@dataclass(frozen=True, slots=True)
class Timeline:
    """One request on the client's clock: arrival, prompt, and when each token arrived."""

    start: float
    prompt_tokens: int
    token_times: tuple[float, ...]  # the first token's, then each later one's

    @property
    def first(self) -> float:
        return self.token_times[0]

    @property
    def last(self) -> float:
        return self.token_times[-1]

    def tokens_before(self, t: float) -> int:
        return bisect.bisect_left(self.token_times, t)


def timelines(records: Iterable[Mapping[str, Any]]) -> list[Timeline]:
    """The successful requests of one run (records as `pdctl bench --save-requests` keeps
    them), each with at least one token."""
    out = []
    for r in records:
        if not r.get("ok") or r.get("output_tokens", 0) < 1:
            continue
        first = r["start"] + r["ttft"]
        times = tuple(accumulate(r.get("itl") or [], initial=first))
        out.append(Timeline(r["start"], int(r["prompt_tokens"]), times))
    return out


def step_observations(
    run: list[Timeline], owners: list[Timeline] | None = None, cached: bool = False
) -> list[StepObservation]:
    """The inter-token gaps of `owners` (default: every request of the run) as the steps they
    were; the whole run says who else was in each step. `cached`: the run's prompts were in
    the server's prefix cache, so its prefills computed (next to) nothing."""
    firsts = sorted((t.first, 0 if cached else t.prompt_tokens) for t in run)
    first_times = [f for f, _ in firsts]
    out: list[StepObservation] = []
    for own in run if owners is None else owners:
        for a, b in zip(own.token_times, own.token_times[1:], strict=False):
            out.append(_observe(run, firsts, first_times, a, b))
    return out


def _observe(
    run: list[Timeline],
    firsts: list[tuple[float, int]],
    first_times: list[float],
    a: float,
    b: float,
) -> StepObservation:
    mid = (a + b) / 2
    seqs = ctx = 0
    for t in run:
        if t.first < mid < t.last:
            seqs += 1
            ctx += t.prompt_tokens + t.tokens_before(mid)
    late = min(LATE_FIRST_S, (b - a) / 4)
    lo = bisect.bisect_right(first_times, a + late)
    hi = bisect.bisect_right(first_times, b + late)
    prefill = sum(tokens for _, tokens in firsts[lo:hi])
    return StepObservation(b - a, seqs, ctx, prefill)
