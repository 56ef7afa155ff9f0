"""Least squares on a few coefficients of the step cost, each with a meaning:

    step_s = base_s + decode_seq_s * decode_seqs + ctx_token_s * context tokens
             + prefill_token_s * prefill tokens

base_s is what every step pays (reading the weights, the CPU's scheduling and sampling),
decode_seq_s what each running decode adds, ctx_token_s what each cached token its attention
reads adds, prefill_token_s what each prompt token computed adds. A coefficient the data
would make negative (two regressors moving together, e.g. decodes and their context when all
prompts have one length) is held at zero and the rest refitted: non-negative least squares by
elimination, small enough to read. The hand-off is fitted apart, from the transfer part of
each request's TTFT as a pdctl proxy reports it (domain/measures/ttft_parts.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.model.calibration.observations import StepObservation

COEFFICIENTS = ("base_s", "decode_seq_s", "ctx_token_s", "prefill_token_s")


class FitError(ValueError):
    """The measurements cannot pin the coefficients down (too few, or none of a kind)."""


@dataclass(frozen=True, slots=True)
class StepCoefficients:
    base_s: float
    decode_seq_s: float
    ctx_token_s: float
    prefill_token_s: float

    def seconds(self, decode_seqs: float, ctx_tokens: float, prefill_tokens: float) -> float:
        return (
            self.base_s
            + self.decode_seq_s * decode_seqs
            + self.ctx_token_s * ctx_tokens
            + self.prefill_token_s * prefill_tokens
        )


@dataclass(frozen=True, slots=True)
class HandoffFit:
    """The hand-off as a setup time plus a time per prompt token, from `requests` transfers."""

    setup_s: float
    token_s: float
    requests: int


def _row(o: StepObservation) -> list[float]:
    return [1.0, float(o.decode_seqs), float(o.ctx_tokens), float(o.prefill_tokens)]


# Fewest steps, and fewest steps with a prefill in them, that pin the coefficients.
MIN_STEPS = 50
MIN_PREFILL_STEPS = 10


def fit_steps(observations: Sequence[StepObservation]) -> StepCoefficients:
    """The coefficients minimising the squared error of the step times; FitError when there
    are too few steps, or too few with a prefill in them to say what a prompt token costs."""
    with_prefill = sum(o.prefill_tokens > 0 for o in observations)
    if len(observations) < MIN_STEPS:
        raise FitError(f"{len(observations)} decode steps measured, need at least {MIN_STEPS}")
    if with_prefill < MIN_PREFILL_STEPS:
        raise FitError(
            f"{with_prefill} steps had a prefill in them, need at least {MIN_PREFILL_STEPS}: "
            "bench at a rate where requests overlap"
        )
    first = _nonnegative(observations)
    # Steps the client saw late (its own or the server's process descheduled on a busy
    # machine) are one-sided outliers: drop those far above the first fit, then refit.
    residuals = [o.seconds - first.seconds(*_regressors(o)) for o in observations]
    spread = sorted(abs(r) for r in residuals)[len(residuals) // 2]
    kept = [o for o, r in zip(observations, residuals, strict=True) if r <= TRIM * spread]
    return _nonnegative(kept) if len(kept) >= MIN_STEPS else first


# Residuals above this many times the median absolute residual are dropped before the refit.
TRIM = 3.0


def _regressors(o: StepObservation) -> tuple[float, float, float]:
    return o.decode_seqs, o.ctx_tokens, o.prefill_tokens


def _nonnegative(observations: Sequence[StepObservation]) -> StepCoefficients:
    rows = [_row(o) for o in observations]
    ys = [o.seconds for o in observations]
    active = list(range(len(COEFFICIENTS)))
    while True:
        solved = _least_squares([[r[j] for j in active] for r in rows], ys)
        if solved is None:  # a column all zeros or collinear: drop the last regressor left
            active.pop()
            continue
        negative = [j for j, v in zip(active, solved, strict=True) if v < 0 and j != 0]
        if not negative:
            break
        active.remove(min(negative, key=lambda j: solved[active.index(j)]))
    values = dict.fromkeys(range(len(COEFFICIENTS)), 0.0)
    values.update(zip(active, solved, strict=True))
    return StepCoefficients(*(values[j] for j in range(len(COEFFICIENTS))))


def fit_handoff(transfers: Sequence[tuple[int, float]], setup_s: float) -> HandoffFit | None:
    """(prompt tokens, transfer seconds) per request: setup plus a time per token by least
    squares when the prompts' lengths vary, else the given setup and the mean per token."""
    if len(transfers) < 3:
        return None
    lengths = [n for n, _ in transfers]
    if max(lengths) > 1.1 * min(lengths):
        solved = _least_squares([[1.0, float(n)] for n in lengths], [s for _, s in transfers])
        if solved is not None and solved[0] >= 0 and solved[1] > 0:
            return HandoffFit(solved[0], solved[1], len(transfers))
    setup = min(setup_s, min(s for _, s in transfers))
    per_token = sum((s - setup) / n for n, s in transfers) / len(transfers)
    return HandoffFit(setup, max(per_token, 0.0), len(transfers))


def _least_squares(rows: list[list[float]], ys: list[float]) -> list[float] | None:
    """Solve the normal equations (X'X) b = X'y by Gauss-Jordan with partial pivoting;
    None when X'X is singular. The columns are scaled to unit size first: prompt tokens in
    the thousands beside a column of ones would otherwise lose digits."""
    k = len(rows[0]) if rows else 0
    if k == 0:
        return None
    scale = [max(abs(r[j]) for r in rows) or 1.0 for j in range(k)]
    xs = [[r[j] / scale[j] for j in range(k)] for r in rows]
    a = [[sum(x[i] * x[j] for x in xs) for j in range(k)] for i in range(k)]
    b = [sum(x[i] * y for x, y in zip(xs, ys, strict=True)) for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12 * max(1.0, a[col][col]):
            return None
        a[col], a[pivot] = a[pivot], a[col]
        b[col], b[pivot] = b[pivot], b[col]
        for r in range(k):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [ar - f * ac for ar, ac in zip(a[r], a[col], strict=True)]
                b[r] -= f * b[col]
    return [b[i] / a[i][i] / scale[i] for i in range(k)]
