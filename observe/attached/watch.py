"""Watching an attached deployment (engines pdctl did not start, controller/spec/attach.py):
its status rows from the spec's addresses, and its client-side figures from the engines' own
histograms when no pdctl proxy stands in front. Pure: specs and scraped state in.

Where each figure comes from when the proxy is not pdctl's (`latency_source` "engines"):
- TTFT: a PD request's first token comes after the prefill's whole leg and the decode's own
  TTFT (which includes its KV pull); vLLM's histograms time each on its own engine from the
  request's arrival there. So the client's TTFT is their sum, estimated quantile by quantile
  (exact for the median of two narrow distributions, an upper bound for the tail).
- ITL: the decode engines' inter-token histograms.
- Attainment: first tokens within the TTFT target (decode + prefill median) out of the
  requests the prefills finished or the decodes answered, whichever is more: a request that
  was prefilled and never answered (its decode died) counts as missed. The ITL target is not
  judged (a histogram holds no per-request ITL).
A median read from vLLM's coarse buckets (0.1-0.25 s, 0.25-0.5 s) by linear interpolation
assumes the observations spread evenly over a bucket 2.5 times wide; when the median's bucket
holds most of the window's observations, the window's exact mean (_sum/_count), kept inside
that bucket, is the better centre. Means also add exactly, so the two legs' means give the
client's mean TTFT. Measured on a stand-in pair behind vllm-router (32 requests at 4/s):
client median 432 ms, mean 476; legs' means added 465; legs' interpolated medians added 533.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from observe.frames import Histogram
from observe.metrics.quantiles import Quantile, histogram, monotonic
from observe.metrics.samples import cumulative_buckets, total
from observe.metrics.windows import Delta

ONE_BUCKET_SHARE = 0.5  # the median's bucket holds most of the window: the mean is its centre
QUANTILE_KEYS: tuple[Quantile, ...] = ("p50", "p90", "p99")
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"


def attached_units(
    spec: Any, found: Mapping[str, Mapping[str, str]] | None = None
) -> list[dict[str, Any]]:
    """Status rows for an attached deployment: each instance at its URL (always "RUNNING":
    pdctl owns no process; whether it answers is the scrape's `up`), and its proxy when it is
    pdctl's (whose /metrics carry the client's figures). A group that discovers its instances
    has those `found` last (group -> instance name -> URL, observe/discovery/). An instance
    moved at runtime (`role_switch.serving`, controller/switch/attached_steer.py) shows the
    role it serves."""
    moved = spec.role_switch.serving if spec.role_switch is not None else {}
    units = [
        {
            "name": name,
            "role": moved.get(name, group.role).value,
            "group": group.name,
            "mode": group.mode.value if group.mode else None,
            "state": "RUNNING",
            "url": url,
            "attached": True,
        }
        for group in spec.groups
        for name, url in _instances(group, found or {}).items()
    ]
    proxy = spec.external_proxy
    if proxy is not None and proxy.kind.value == "pdctl":
        units.insert(0, _proxy_row(proxy))
    return units


def _instances(group: Any, found: Mapping[str, Mapping[str, str]]) -> Mapping[str, str]:
    if getattr(group, "discover", None) is not None:
        return found.get(group.name, {})
    return {f"{group.name}-{i}": url for i, url in enumerate(group.urls)}


def discovered(frame: Mapping[str, Any] | None) -> dict[str, dict[str, str]]:
    """Group -> instance name -> URL, as a frame's discovery section shows them."""
    return {d["group"]: d["found"] for d in (frame or {}).get("discovery") or []}


def canary_units(spec: Any, units: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows the canary reads: the user's proxy, whatever its kind, is where it sends."""
    proxy = spec.external_proxy
    if proxy is None or any(u["role"] == "proxy" for u in units):
        return units
    return [_proxy_row(proxy), *units]


def attached_status(spec: Any, frame: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The status rows `GET .../status` answers for an attached deployment: its user's proxy
    (where `pdctl bench --deployment` sends load) and each instance, "RUNNING" while it
    answers and "DOWN" once the observer's last frame says it does not (before any frame:
    "RUNNING", as attached). A proxy that is not pdctl's is not scraped: `watched` false."""
    shown = {i["name"]: i["up"] for i in (frame or {}).get("instances", [])}
    if frame is not None and frame.get("proxy") is not None:
        shown["proxy"] = frame["proxy"]["up"]
    rows = []
    for unit in canary_units(spec, attached_units(spec, discovered(frame))):
        up = shown.get(unit["name"])
        watched = unit["role"] != "proxy" or unit.get("kind") == "pdctl"
        state = "DOWN" if watched and up is False else "RUNNING"
        rows.append({**unit, "state": state, "watched": watched})
    return rows


def _proxy_row(proxy: Any) -> dict[str, Any]:
    return {
        "name": "proxy",
        "role": "proxy",
        "state": "RUNNING",
        "url": proxy.url,
        "kind": proxy.kind.value,
        "attached": True,
    }


def engine_latency(
    prefills: Sequence[Delta], decodes: Sequence[Delta], slo_ttft_ms: float | None
) -> dict[str, Any]:
    """The client's TTFT and ITL and the attainment as the engines' histograms give them
    (see the module's docstring), for a frame without a pdctl proxy."""
    pre_ttft = _summed(prefills, TTFT)
    dec_ttft = _summed(decodes, TTFT)
    itl = _refined(_summed(decodes, ITL), _mean(decodes, ITL))
    pre = _refined(pre_ttft, _mean(prefills, TTFT))
    dec = _refined(dec_ttft, _mean(decodes, TTFT))
    ttft = _added(dec, pre) if dec is not None else None
    answered = dec["count"] if dec is not None else 0.0
    prefilled = sum(total(d.counts, "vllm:request_success_total") or 0.0 for d in prefills)
    ended = max(answered, prefilled)
    met = None
    if slo_ttft_ms is not None:
        # the decode's own share of the target: what the prefill's median left of it
        left = slo_ttft_ms / 1000 - ((pre["p50"] if pre is not None else None) or 0.0)
        met = _at_most(dec_ttft, left) if dec_ttft else 0.0
    return {
        "ttft": ttft or histogram(None),
        "itl": itl or histogram(None),
        "slo_attainment": met / ended if ended > 0 and met is not None else None,
        "answered": answered,
        "prefilled": prefilled,
    }


def _summed(deltas: Sequence[Delta], name: str) -> list[tuple[float, float]]:
    acc: dict[float, float] = {}
    for d in deltas:
        for bound, count in cumulative_buckets(d.counts, name) or ():
            acc[bound] = acc.get(bound, 0.0) + count
    return sorted(acc.items())


def _mean(deltas: Sequence[Delta], name: str) -> float | None:
    seconds = sum(total(d.counts, name + "_sum") or 0.0 for d in deltas)
    count = sum(total(d.counts, name + "_count") or 0.0 for d in deltas)
    return seconds / count if count > 0 else None


def _refined(cumulative: list[tuple[float, float]], mean: float | None) -> Histogram | None:
    """The window's histogram, its median taken from the mean when its bucket holds most."""
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    shown = histogram(cumulative)
    if mean is None:
        return shown
    buckets, below, lower = monotonic(cumulative), 0.0, 0.0
    count = buckets[-1][1]
    for upper, cum in buckets:
        if cum - below > ONE_BUCKET_SHARE * count:
            shown["p50"] = min(max(mean, lower), upper)
            break
        below, lower = cum, upper
    return shown


def _added(a: Histogram, b: Histogram | None) -> Histogram:
    """`a` with `b`'s quantiles added to its own (the legs of one request, in sequence)."""
    if b is None:
        return a
    out: Histogram = {**a}
    for key in QUANTILE_KEYS:
        x, y = a[key], b[key]
        out[key] = x + y if x is not None and y is not None else x
    return out


def _at_most(cumulative: list[tuple[float, float]], seconds: float) -> float:
    """Observations at or under `seconds`, interpolated within its bucket."""
    below, lower = 0.0, 0.0
    for upper, cum in monotonic(cumulative):
        if seconds <= upper:
            if upper == float("inf") or upper <= lower:
                return below
            return below + (cum - below) * max(0.0, seconds - lower) / (upper - lower)
        below, lower = cum, upper
    return below


def roles(units: Sequence[Mapping[str, Any]], targets: Mapping[str, Any], window: str, role: str):
    """The window deltas of the instances of `role` that answered."""
    return [
        t.delta(window)
        for u in units
        if u.get("role") == role and (t := targets.get(u["name"])) is not None and t.up
    ]


@dataclass(frozen=True, slots=True)
class HealthTransition:
    """An attached instance stopped or started answering (an event, as pd_check's are)."""

    kind: str
    message: str
    detail: dict[str, Any]


def health_transition(
    deployment: str, unit: Mapping[str, Any], was_up: bool | None, up: bool, why: str | None
) -> HealthTransition | None:
    """The event when an attached instance's answer changes; none for the first scrape that
    finds it up (it was never known down)."""
    if (was_up is None and up) or was_up == up:
        return None
    where = f"{deployment}/{unit['name']} ({unit.get('url')})"
    if up:
        return HealthTransition(
            "attached.instance_up", f"{where} answers again", {"instance": unit["name"]}
        )
    return HealthTransition(
        "attached.instance_down",
        f"{where} stopped answering: {why or 'no answer'}",
        {"instance": unit["name"], "url": unit.get("url"), "why": why},
    )
