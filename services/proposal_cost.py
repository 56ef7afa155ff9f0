"""What applying a proposal costs while it runs, from what the rollout would really do
(controller/service.py `forecast_apply`: which processes restart and by which strategy) and
how long this deployment's processes took to start (the supervisor's measured starts).

A change the proxy restarts for (a topology or connector change) can only be recreated: new
connections are refused while the proxy restarts, requests in flight fail, and new ones fail
until the restarted instances serve. Roll and hold lose nothing; a hold makes new requests
wait. Pure: the forecast, the measured starts and the request rate in, words and figures out.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

PROXY = "proxy"


def restart_cost(
    preview: Mapping[str, Any],
    starts: Mapping[str, Sequence[float]],
    rate: float | None,
    hold_deadline_s: float,
) -> dict[str, Any]:
    """{"disruption": words, "strategy", "restart": [...], "proxy_restarts", "proxy_restart_s",
    "instances_restart_s", "requests_at_risk"} for a revision rolled out by the forecast's
    default strategy. `starts`: measured starts by group ("" is the proxy's)."""
    changes = preview.get("changes") or {}
    moving = [*changes.get("restart", []), *changes.get("start", [])]
    stopping = list(changes.get("stop", []))
    strategy = str(preview.get("default") or "recreate")
    proxy = PROXY in moving
    instances = [n for n in moving if n != PROXY]
    proxy_s = _median(starts.get("") or starts.get(PROXY) or ())
    engine_s = _slowest(instances, starts)
    out: dict[str, Any] = {
        "strategy": strategy,
        "restart": moving,
        "stop": stopping,
        "proxy_restarts": proxy,
        "proxy_restart_s": proxy_s,
        "instances_restart_s": engine_s,
        "requests_at_risk": None,
    }
    if not moving and not stopping:
        out["disruption"] = "nothing restarts: the running processes already match it"
        return out
    what = _processes(instances, stopping)
    if strategy == "roll":
        out["disruption"] = (
            f"by roll: {what}, one prefill/decode pair at a time drained and restarted "
            f"(each {_took(engine_s)}) while the others serve; no request is refused"
        )
    elif strategy == "hold":
        out["disruption"] = (
            f"by hold: {what} at once; new requests wait in the proxy's queue "
            f"{_took(engine_s)} and get 503 past its {hold_deadline_s:g} s hold deadline"
        )
    else:
        out["disruption"], out["requests_at_risk"] = _recreated(
            proxy, what, proxy_s, engine_s, rate
        )
    return out


def _recreated(
    proxy: bool, what: str, proxy_s: float | None, engine_s: float | None, rate: float | None
) -> tuple[str, int | None]:
    if proxy:
        head = (
            f"by recreate (the proxy restarts, so nothing can keep serving through it): the "
            f"proxy refuses new connections {_took(proxy_s)} while it restarts, and its "
            f"requests in flight fail; {what} at once, and new requests fail until they "
            f"serve, {_took(engine_s)}"
        )
    else:
        head = (
            f"by recreate: {what} at once; requests in flight on them fail and new ones are "
            f"refused until they serve, {_took(engine_s)}"
        )
    down = max((s for s in (proxy_s, engine_s) if s is not None), default=None)
    if down is None or not rate:
        return head + " (no start of this deployment measured yet: how long is unknown)", None
    at_risk = round(rate * down)
    return (
        head + f": at the measured {rate:.3g} req/s about {at_risk} requests fail or are "
        f"refused over those ~{down:.1f} s, besides those in flight",
        at_risk,
    )


def _processes(instances: Sequence[str], stopping: Sequence[str]) -> str:
    restart = f"{len(instances)} engine instance(s) restart ({', '.join(instances)})"
    if not instances:
        restart = "no engine instance restarts"
    if stopping:
        restart += f", {len(stopping)} stop ({', '.join(stopping)})"
    return restart


def _slowest(instances: Sequence[str], starts: Mapping[str, Sequence[float]]) -> float | None:
    medians = [_median(starts.get(n.rsplit("-", 1)[0]) or ()) for n in instances]
    known = [m for m in medians if m is not None]
    return max(known) if known else None


def _median(samples: Sequence[float]) -> float | None:
    return round(statistics.median(samples), 2) if samples else None


def _took(seconds: float | None) -> str:
    if seconds is None:
        return "for their start time (not measured yet)"
    return f"for ~{seconds:.1f} s (the median measured start)"
