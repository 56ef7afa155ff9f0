"""Disturbed windows: which rollouts ran inside a frame's window, how many real requests it
holds, and whether it is evidence to decide from (domain/measures/evidence.py says what counts).
Pure: the rollouts the controller keeps (duck-typed: id, kind, strategy, state, started_at,
ended_at) and the proxy's counter increases in, marks and verdicts out."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from domain.measures.evidence import AFTER_CHANGE_S, MIN_REAL_REQUESTS, NOT_A_CHANGE, not_enough
from observe.frames import ChangeMark, Evidence
from observe.metrics.samples import total
from observe.metrics.windows import Delta

REQUESTS = "pdctl_proxy_requests_total"  # every outcome; canaries are counted apart
ARRIVALS = "pdctl_proxy_arrival_gaps_total"  # one per client arrival (the first ever aside)


def marks(rollouts: Iterable[Any], now: float, within_s: float) -> list[ChangeMark]:
    """The rollouts (newest first) that run or ended within `within_s` of `now`."""
    out: list[ChangeMark] = []
    for r in rollouts:
        if r.kind in NOT_A_CHANGE:
            continue
        running = r.state == "running"
        if not running and (r.ended_at is None or now - r.ended_at > within_s):
            continue
        out.append(
            {
                "id": str(r.id),
                "kind": r.kind,
                "strategy": r.strategy,
                "running": running,
                "started_at": r.started_at,
                "ended_at": None if running else r.ended_at,
            }
        )
    return out


def inside(changes: Sequence[ChangeMark], now: float, window_s: float) -> list[ChangeMark]:
    """The changes that disturb a window of `window_s` ending now: running, or ended within
    the window or the settling after it."""
    return [
        c
        for c in changes
        if c["running"]
        or (c["ended_at"] is not None and now - c["ended_at"] <= window_s + AFTER_CHANGE_S)
    ]


def real_requests(proxy: Delta) -> int | None:
    """Client requests that reached the proxy over the delta: those it ended (every outcome)
    or, when more, those that arrived (long requests arrive well before they end); None when
    it exports neither counter. Canaries are in neither."""
    counts = [
        c for c in (total(proxy.counts, REQUESTS), total(proxy.counts, ARRIVALS)) if c is not None
    ]
    return round(max(counts)) if counts else None


def judge(
    real: int | None, changes: Sequence[ChangeMark], window: str, window_s: float, now: float
) -> Evidence:
    """Whether the window is evidence, and if not, why (the disturbance first)."""
    disturbing = inside(changes, now, window_s)
    why = None
    if disturbing:
        why = _disturbed_why(disturbing[0], window, now)
    elif real is None:
        why = f"the proxy reports no request counts for the {window} window"
    elif real < MIN_REAL_REQUESTS:
        idle = "no real traffic: " if real == 0 else ""
        why = (
            f"{idle}{real} real request(s) in the {window} window, {MIN_REAL_REQUESTS} "
            "needed; pdctl's own canaries and probes are not traffic"
        )
    return {
        "real_requests": real,
        "min_requests": MIN_REAL_REQUESTS,
        "changes": list(disturbing),
        "disturbed": bool(disturbing),
        "enough": why is None,
        "why": None if why is None else not_enough(why),
    }


def _disturbed_why(change: ChangeMark, window: str, now: float) -> str:
    what = _what(change)
    if change["running"]:
        return f"{what} is running: the {window} window measures the change, not the workload"
    ago = now - (change["ended_at"] or now)
    return (
        f"{what} ended {ago:.0f} s ago, inside the {window} window and its "
        f"{AFTER_CHANGE_S:g} s settling: it measures the change, not the workload"
    )


def _what(change: ChangeMark) -> str:
    kind = change["kind"]
    noun = {"switch": "a mode switch", "role_move": "a role move"}.get(kind, f"a {kind} rollout")
    return f"{noun} (rollout {change['id']}, {change['strategy']})"
