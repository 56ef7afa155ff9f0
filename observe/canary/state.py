"""The correctness canary, pure: is the answer that came through the hand-off the model's own?

Every `canary.interval_s` (controller/spec/sections/canary.py; 30 s by default, 0 off) the control
plane sends one fixed greedy prompt (temperature 0, ignore_eos, fixed max_tokens) through the
proxy, marked as a canary (connector/dispatch/canary.py), and compares the answer token by token
with
a reference answer of the same model colocated: the prefill instance that served the canary,
asked alone, which moves no KV. A mismatch names the pair (from the proxy's answer headers)
and the first differing token (index, expected, got).

Why the prefill alone, not an answer stored per model revision: it needs no table kept by
hand, follows a model or engine upgrade by itself, and is the same weights on the same
hardware, so the hand-off is the one thing that differs.

Robust to real engines, whose greedy output may differ under other batching (item 5 measures
the rate on the CPU vLLM pair): a reference is recorded once, when first needed, and kept as
one of a bounded set of accepted answers. A canary that matches none is not judged on that
alone: the serving prefill is asked alone again at once. If that fresh colocated answer is
the canary's own, the model's answer moved (batching, a new revision), not the hand-off: it
joins the accepted set and the verdict is ok ("re-recorded"). Only an answer that differs from
a fresh colocated answer of the same prefill is a mismatch. `compare_tokens` narrows the
comparison to the first K tokens when long-tail divergence is expected.

Tokens here are the answer's whitespace pieces: the stand-in's tokens exactly (domain/
tokenizer.py); on real vLLM a coarser unit, which a mismatch reports as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from domain.canary_marks import greedy_body

PROMPT = (
    "pdctl canary: repeat after me the fixed sentence that checks the hand-off of the cache "
    "from prefill to decode, word by word, in the same order every time"
)
MAX_REFERENCES = 4  # accepted answers kept per deployment


def request_body(model: str, max_tokens: int) -> dict[str, Any]:
    """The canary's request: greedy, fixed length, one whole (non-streamed) answer."""
    return greedy_body(model, PROMPT, max_tokens)


def answer_tokens(body: Any) -> list[str] | None:
    """The tokens of a completion body; None when it is not one."""
    try:
        text = body["choices"][0]["text"]
    except (KeyError, IndexError, TypeError):
        return None
    return text.split() if isinstance(text, str) else None


@dataclass(frozen=True, slots=True)
class Difference:
    index: int
    expected: str | None  # None: the answer is longer than the reference
    got: str | None  # None: the answer stopped short

    def describe(self) -> dict[str, Any]:
        return {"index": self.index, "expected": self.expected, "got": self.got}


def first_difference(
    reference: Sequence[str], answer: Sequence[str], compare_tokens: int | None = None
) -> Difference | None:
    """Where `answer` first differs from `reference` (within the first `compare_tokens`)."""
    ref, got = list(reference[:compare_tokens]), list(answer[:compare_tokens])
    for i, (a, b) in enumerate(zip(ref, got, strict=False)):
        if a != b:
            return Difference(i, a, b)
    if len(ref) != len(got):
        i = min(len(ref), len(got))
        return Difference(i, ref[i] if i < len(ref) else None, got[i] if i < len(got) else None)
    return None


def matches_any(references: Sequence[Sequence[str]], answer: Sequence[str], k: int | None) -> bool:
    return any(first_difference(r, answer, k) is None for r in references)


def due(last_sent: float | None, interval_s: float, now: float) -> bool:
    """A canary is due: on (interval > 0) and none sent within the interval."""
    return interval_s > 0 and (last_sent is None or now - last_sent >= interval_s)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One canary's outcome: ok | mismatch | error."""

    result: str
    at: float
    prefill: str | None = None
    decode: str | None = None
    difference: Difference | None = None
    note: str | None = None  # why: the error, or "re-recorded" for a moved reference
    # the answering engine's own timing of this canary, ms, when its response carried it
    # (domain/measures/per_request_metrics.py: the decode's, behind a PD proxy); None otherwise
    engine: dict[str, float] | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "result": self.result,
            "at": self.at,
            "prefill": self.prefill,
            "decode": self.decode,
            "first_difference": self.difference.describe() if self.difference else None,
            "note": self.note,
            "engine_metrics": self.engine,
        }


def judge(
    references: Sequence[Sequence[str]],
    answer: Sequence[str],
    fresh: Sequence[str] | None,
    compare_tokens: int | None = None,
) -> tuple[str, Difference | None, list[list[str]]]:
    """(ok | mismatch, the first difference, the accepted references after). `fresh` is the
    serving prefill's own answer asked again (None: not asked, the answer matched)."""
    refs = [list(r) for r in references]
    if matches_any(refs, answer, compare_tokens):
        return "ok", None, refs
    if fresh is None:
        raise ValueError("a canary that matches no reference needs a fresh colocated answer")
    diff = first_difference(fresh, answer, compare_tokens)
    if diff is None:  # the model's own answer moved: accept it
        return "ok", None, [list(fresh), *refs][:MAX_REFERENCES]
    return "mismatch", diff, refs


@dataclass(frozen=True, slots=True)
class Transition:
    kind: str  # canary.mismatch | canary.recovered
    message: str
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CanaryState:
    """One deployment's canary: accepted references, counts, the last verdict, and since when
    each failing pair fails (an event per onset and per recovery, not per period)."""

    references: tuple[tuple[str, ...], ...] = ()
    last_sent: float | None = None
    last: Verdict | None = None
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "mismatch": 0, "error": 0})
    failing: dict[tuple[str | None, str | None], float] = field(default_factory=dict)


def step(state: CanaryState, verdict: Verdict) -> tuple[CanaryState, list[Transition]]:
    """Take one verdict in; the events it makes."""
    counts = {**state.counts, verdict.result: state.counts.get(verdict.result, 0) + 1}
    failing = dict(state.failing)
    pair = (verdict.prefill, verdict.decode)
    moved: list[Transition] = []
    if verdict.result == "mismatch" and pair not in failing:
        failing[pair] = verdict.at
        d = verdict.difference
        where = f" at token {d.index}: expected {d.expected!r}, got {d.got!r}" if d else ""
        moved.append(
            Transition(
                "canary.mismatch",
                f"canary answer through prefill {verdict.prefill} and decode {verdict.decode} "
                f"differs from the model's colocated answer{where}",
                verdict.describe(),
            )
        )
    elif verdict.result == "ok" and pair in failing:
        since = failing.pop(pair)
        moved.append(
            Transition(
                "canary.recovered",
                f"canary answer through prefill {verdict.prefill} and decode {verdict.decode} "
                f"matches again (failing for {verdict.at - since:.0f} s)",
                {**verdict.describe(), "since": since},
            )
        )
    return replace(state, last=verdict, counts=counts, failing=failing), moved


def section(state: CanaryState | None, interval_s: float, applies: bool, why: str | None) -> dict:
    """The frame's `canary` section: the last verdict beside the SLO figures, and the one line
    the deployment page and `pdctl top` show of it (`state`: failing | ok | error | waiting |
    off)."""
    last = state.last if state is not None else None
    on = applies and interval_s > 0
    why = why if not applies else ("off (canary.interval_s is 0)" if interval_s <= 0 else None)
    failing = [
        {"prefill": p, "decode": d, "since": at}
        for (p, d), at in (state.failing.items() if state is not None else ())
    ]
    counts = dict(state.counts) if state is not None else {}
    shown, line = _line(on, why, last, failing, counts, interval_s)
    return {
        "applies": on,
        "why": why,
        "interval_s": interval_s,
        "last": last.describe() if last is not None else None,
        "counts": counts,
        "failing": failing,
        "state": shown,
        "line": line,
    }


def _line(
    on: bool, why: str | None, last: Verdict | None, failing: list, counts: dict, every: float
) -> tuple[str, str]:
    if not on:
        return "off", f"canary: {why}"
    if failing:
        f = failing[0]
        d = last.difference if last is not None and last.result == "mismatch" else None
        where = f" at token {d.index} (expected {d.expected!r}, got {d.got!r})" if d else ""
        more = f" and {len(failing) - 1} more pair(s)" if len(failing) > 1 else ""
        return "failing", (
            f"canary FAILING since {_hms(f['since'])}: the answer through prefill "
            f"{f['prefill']} and decode {f['decode']}{more} differs from the model's colocated "
            f"answer{where}; attainment counts these 200s as met"
        )
    if last is None:
        return "waiting", f"canary: first check within {every:g} s"
    if last.result == "error":
        return "error", f"canary not judged at {_hms(last.at)}: {last.note}"
    n = counts.get("ok", 0)
    return (
        "ok",
        f"canary ok at {_hms(last.at)}: the hand-off's answer is the colocated one ({n} ok)",
    )


def _hms(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%S UTC")
