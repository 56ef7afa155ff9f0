"""Is PD happening? Per decode instance, the share of its prompt tokens that arrived by KV
transfer over the check's window, and a verdict with hysteresis. Pure: deltas and `now` in,
states, the frame's section and the transitions to record out (observe/scrape/observer.py keeps the
states and records the transitions as events).

The rule, over the last 10 s (CHECK_WINDOW) of one decode's counters:
- share = external_kv_transfer / (external_kv_transfer + local_compute) from
  vllm:prompt_tokens_by_source_total. Prefix-cache hits (local_cache_hit) are neither: a hit
  is not recomputation, and it is left out of both sides. A healthy decode computes only each
  prompt's last token, so its share is (prompt - 1) / prompt.
- Traffic flows when at least MIN_REQUESTS requests reached their first token on it
  (vllm:time_to_first_token_seconds) and MIN_PROMPT_TOKENS prompt tokens were received or
  computed, at least MIN_PROMPT_MEAN a request (a healthy 8-token prompt reads 7/8, clear
  of both lines; shorter ones cannot tell); with less, nothing is judged and the last
  verdict stands ("idle").
- Onset: share < COLLAPSE_BELOW (0.5) while traffic flows: "recomputing", since now.
- Recovery: share >= RECOVER_AT (0.8) while traffic flows. Between the two the verdict holds,
  so a share wavering around one line cannot flap. One event per onset, one per recovery.
- A decode that exports no prompt_tokens_by_source (older vLLM) cannot be judged
  ("unmeasured"); a colocated deployment has no hand-off, and the check does not apply.
- While any rollout runs (a mode switch, a role move, an apply, a restart) and for one
  window after it ends, no onset is judged ("paused"): keep-serving runs whole requests on
  the decode that stays up, which is recomputation by design, and an instance moved back to
  decode carries the prompts it computed as a prefill in its window. A recovery still counts.
Failed KV transfers (vllm:nixl_/moriio_num_failed_transfers) in the window are reported
beside the share: they tell a transfer failing over to recompute from a decode that never
tried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from observe.frames import WINDOW_SECONDS, ChangeMark, PdDecode, PdHappening
from observe.metrics.samples import total
from observe.metrics.windows import Delta

CHECK_WINDOW = "10s"
MIN_REQUESTS = 3
MIN_PROMPT_TOKENS = 64
MIN_PROMPT_MEAN = 8
COLLAPSE_BELOW = 0.5
RECOVER_AT = 0.8
RULE = {
    "window": CHECK_WINDOW,
    "min_requests": MIN_REQUESTS,
    "min_prompt_tokens": MIN_PROMPT_TOKENS,
    "min_prompt_mean": MIN_PROMPT_MEAN,
    "collapse_below": COLLAPSE_BELOW,
    "recover_at": RECOVER_AT,
}
BY_SOURCE = "vllm:prompt_tokens_by_source_total"
FAILED_TRANSFERS = (
    "vllm:nixl_num_failed_transfers_total",
    "vllm:moriio_num_failed_transfers_total",
)
COLOCATED_WHY = "colocated: no KV hand-off, each instance computes its own prompts"


@dataclass(frozen=True, slots=True)
class Reading:
    """One decode's prompt tokens by source over the window (external None: not exported)."""

    external: float | None
    local_compute: float = 0.0
    cache_hit: float = 0.0
    requests: float | None = None  # first tokens in the window (None: no TTFT histogram)
    failed_transfers: float = 0.0

    @property
    def judged_tokens(self) -> float:
        return (self.external or 0.0) + self.local_compute

    @property
    def share(self) -> float | None:
        tokens = self.judged_tokens
        return None if self.external is None or tokens <= 0 else self.external / tokens

    @property
    def traffic(self) -> bool:
        tokens, requests = self.judged_tokens, self.requests
        if requests is None:  # no TTFT histogram: tokens alone
            return tokens >= MIN_PROMPT_TOKENS
        return (
            requests >= MIN_REQUESTS
            and tokens >= MIN_PROMPT_TOKENS
            and tokens >= MIN_PROMPT_MEAN * requests
        )


def reading(delta: Delta) -> Reading:
    counts = delta.counts
    external = total(counts, BY_SOURCE, source="external_kv_transfer")
    failed = [total(counts, name) for name in FAILED_TRANSFERS]
    return Reading(
        external=external,
        local_compute=total(counts, BY_SOURCE, source="local_compute") or 0.0,
        cache_hit=total(counts, BY_SOURCE, source="local_cache_hit") or 0.0,
        requests=total(counts, "vllm:time_to_first_token_seconds_count"),
        failed_transfers=sum(f for f in failed if f is not None),
    )


@dataclass(frozen=True, slots=True)
class DecodeState:
    recomputing: bool = False
    since: float | None = None  # when the current verdict began (onset or recovery)


@dataclass(frozen=True, slots=True)
class Transition:
    kind: str  # pd.recomputing | pd.recovered
    instance: str
    message: str
    detail: dict[str, Any]


def step(
    name: str, state: DecodeState, r: Reading | None, now: float, paused: bool = False
) -> tuple[DecodeState, str, Transition | None]:
    """One decode's next state, its status word and the transition it made, if any.
    `r` None: the instance did not answer its scrape (the verdict stands). `paused`: no
    onset is judged (a rollout runs)."""
    if r is None:
        return state, "recomputing" if state.recomputing else "down", None
    share = r.share
    if share is None and r.external is None:
        return state, "recomputing" if state.recomputing else "unmeasured", None
    if not r.traffic or share is None:
        return state, "recomputing" if state.recomputing else "idle", None
    if not state.recomputing and paused:
        return state, "paused", None
    if not state.recomputing and share < COLLAPSE_BELOW:
        new = DecodeState(True, now)
        return new, "recomputing", _transition("pd.recomputing", name, r, share, now, None)
    if state.recomputing and share >= RECOVER_AT:
        new = DecodeState(False, now)
        return new, "ok", _transition("pd.recovered", name, r, share, now, state.since)
    return state, "recomputing" if state.recomputing else "ok", None


def _transition(
    kind: str, name: str, r: Reading, share: float, now: float, began: float | None
) -> Transition:
    figures = (
        f"{share:.0%} of prompt tokens arrived by KV transfer over the last {CHECK_WINDOW} "
        f"({r.external or 0:.0f} transferred, {r.local_compute:.0f} computed here"
        + (f", {r.failed_transfers:.0f} failed transfers" if r.failed_transfers else "")
        + ")"
    )
    if kind == "pd.recomputing":
        message = f"{name} recomputes its prompts: {figures}; PD is not happening there"
    else:
        lasted = f" after {now - began:.0f} s" if began is not None else ""
        message = f"{name} receives KV again{lasted}: {figures}"
    detail = {
        "instance": name,
        "share": round(share, 4),
        "external_tokens": r.external,
        "local_compute_tokens": r.local_compute,
        "cache_hit_tokens": r.cache_hit,
        "failed_transfers": r.failed_transfers,
        "since": now if kind == "pd.recomputing" else began,
        "rule": RULE,
    }
    return Transition(kind, name, message, detail)


def check(
    colocated: bool,
    decodes: Sequence[tuple[str, Delta | None]],
    states: Mapping[str, DecodeState],
    now: float,
    paused: str | None = None,
) -> tuple[dict[str, DecodeState], PdHappening, list[Transition]]:
    """The deployment's check: `decodes` are (instance, its window's delta or None when it did
    not answer), `paused` why no onset is judged now (None: judged). Returns the decodes'
    states, the frame's `pd` section and the transitions."""
    if colocated:
        return {}, not_applicable(COLOCATED_WHY), []
    new: dict[str, DecodeState] = {}
    rows: list[PdDecode] = []
    transitions: list[Transition] = []
    for name, delta in decodes:
        r = reading(delta) if delta is not None else None
        state, status, moved = step(name, states.get(name, DecodeState()), r, now, bool(paused))
        new[name] = state
        if moved is not None:
            transitions.append(moved)
        rows.append(_row(name, status, state, r))
    section: PdHappening = {
        "applies": True,
        "why": paused if paused else None if rows else "no decode instance",
        "rule": RULE,
        "decodes": rows,
        "recomputing": [row["instance"] for row in rows if row["status"] == "recomputing"],
    }
    return new, section, transitions


def _row(name: str, status: str, state: DecodeState, r: Reading | None) -> PdDecode:
    return {
        "instance": name,
        "status": status,
        "share": None if r is None else r.share,
        "since": state.since if state.recomputing else None,
        "prompt_tokens": None if r is None else r.judged_tokens,
        "cache_hit_tokens": None if r is None else r.cache_hit,
        "requests": None if r is None else r.requests,
        "failed_transfers": None if r is None else r.failed_transfers,
    }


def not_applicable(why: str) -> PdHappening:
    return {"applies": False, "why": why, "rule": RULE, "decodes": [], "recomputing": []}


NOT_CHECKED = not_applicable("not checked yet")


def pause_reason(changes: list[ChangeMark], now: float) -> str | None:
    """Why the PD check judges no onset now: a rollout of any kind (a switch, a role move, an
    apply, a restart) runs or ended within the check's window. Keep-serving runs whole
    requests on a decode by design; an instance moved back to decode carries the prompts it
    computed as a prefill in its window; a restart drains."""
    settle = WINDOW_SECONDS[CHECK_WINDOW]
    for c in changes:
        if c["running"] or (c["ended_at"] is not None and now - c["ended_at"] < settle):
            kind = c["kind"]
            what = {"switch": "a mode switch", "role_move": "a role move"}.get(
                kind, f"a {kind} rollout"
            )
            return f"{what} ({c['strategy']}) runs or just ended: no onset judged"
    return None
