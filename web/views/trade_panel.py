"""The first screen's trade panel: the demo pair (services/demo/trade.py) side by side, each with
its
1 min figures, its ITL histogram as bars (the spikes are the bars past the SLO line), and the
advisor's verdict. Pure: a deployment's spec, live frame and advice in, what the template
draws out."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from controller import DeploymentSpec
from services.demo import trade as demo_trade

# The ITL bars span these bucket bounds (seconds): a stand-in step x TIME_SCALE lands inside.
BAR_FLOOR_S = 0.05
BAR_CEILING_S = 5.0


def layout(spec: DeploymentSpec) -> str:
    groups = " + ".join(
        f"{g.count} x {g.role.value} TP{g.tp}" + (f" ({g.mode.value})" if g.mode else "")
        for g in spec.groups
    )
    return f"{spec.topology.value}: {groups}"


def bars(itl: dict[str, Any] | None, slo_itl_ms: float | None) -> list[dict[str, Any]]:
    """One bar per ITL bucket between BAR_FLOOR_S and BAR_CEILING_S: its range in ms, its
    gaps, a height (log scale, so a 2% tail still shows) and whether it lies past the SLO."""
    if not itl or not itl.get("buckets"):
        return []
    rows, lower = [], 0.0
    for upper, count in itl["buckets"]:
        bound = math.inf if upper is None else upper
        if bound > BAR_FLOOR_S and lower < BAR_CEILING_S:
            rows.append((lower, bound, count))
        lower = bound
    top = max((c for _, _, c in rows), default=0)
    out = []
    for low, high, count in rows:
        height = math.log1p(count) / math.log1p(top) if top else 0.0
        out.append(
            {
                "label": _range_label(low, high),
                "count": round(count),
                "height": round(100 * height),
                "over": slo_itl_ms is not None and low * 1000 >= slo_itl_ms,
            }
        )
    return out


def card(
    spec: DeploymentSpec,
    state: str,
    frame: Mapping[str, Any] | None,
    advice: dict[str, Any] | None,
) -> dict[str, Any]:
    """What one side of the panel shows."""
    itl = frame["itl"] if frame else None
    ttft = frame["ttft"] if frame else None
    verdicts = (advice or {}).get("verdicts", [])
    return {
        "name": spec.name,
        "layout": layout(spec),
        "state": state,
        "requests": round(ttft["count"]) if ttft else 0,
        "ttft_p50": _ms(ttft, "p50"),
        "ttft_p99": _ms(ttft, "p99"),
        "itl_p50": _ms(itl, "p50"),
        "itl_p99": _ms(itl, "p99"),
        "attainment": frame.get("slo_attainment") if frame else None,
        "slo": spec.slo,
        "bars": bars(itl, spec.slo.itl_ms),
        "applies": [v for v in verdicts if v.get("triggered")],
        "unknown": sum(v.get("triggered") is None for v in verdicts),
        "live": frame is not None,
    }


def headline(colocated: dict[str, Any], disagg: dict[str, Any]) -> dict[str, Any] | None:
    """The claim in two numbers, once both have them: the ITL ratio and the TTFT ratio."""
    figures = (colocated["itl_p99"], disagg["itl_p99"], colocated["ttft_p99"], disagg["ttft_p99"])
    if any(f is None or f <= 0 for f in figures):
        return None
    itl_c, itl_d, ttft_c, ttft_d = figures
    return {"itl_ratio": itl_c / itl_d, "ttft_ratio": ttft_d / ttft_c}


def about() -> dict[str, Any]:
    """The workload and the scaling, for the panel's caption."""
    return {
        "model": demo_trade.MODEL,
        "hardware": demo_trade.HARDWARE,
        "time_scale": demo_trade.TIME_SCALE,
        "rate": demo_trade.RATE,
        "wall_rate": demo_trade.wall_rate(),
        "input_len": demo_trade.INPUT_LEN,
        "output_len": demo_trade.OUTPUT_LEN,
        "published_slo": demo_trade.PUBLISHED_SLO,
    }


def _ms(histogram: dict[str, Any] | None, key: str) -> float | None:
    value = histogram.get(key) if histogram else None
    return None if value is None else 1000 * value


def _range_label(low: float, high: float) -> str:
    if math.isinf(high):
        return f">{_short(low)}"
    return f"{_short(low)}-{_short(high)}"


def _short(seconds: float) -> str:
    return f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1000:g}"
