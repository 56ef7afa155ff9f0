"""What the bench fit and the live fit (fitting.py, live.py) share: the result, its verdict on
the held-out error, and the error arithmetic. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from simulator.model.calibration.profile import CalibratedProfile
from simulator.plan.cluster import RequestResult

# Held-out error past this: the measurements disagree with each other, and the report says so.
SUSPECT_MAPE = 0.3
HOLD_OUT_EVERY = 5  # without a held-out rate: every 5th request (20%) is not fitted


@dataclass(frozen=True)
class Calibration:
    profile: CalibratedProfile
    report: dict[str, Any]


def judged(profile: CalibratedProfile, report: dict[str, Any], doubt: str) -> Calibration:
    """The profile carrying its held-out error, the report a warning (`doubt`: the likely
    cause) when that error is past SUSPECT_MAPE."""
    worst = max(report["calibrated"]["ttft_mape"] or 0.0, report["calibrated"]["itl_mape"] or 0.0)
    if worst > SUSPECT_MAPE:
        report["warning"] = f"the fit misses what it did not see by {worst:.0%}: {doubt}"
    return Calibration(replace(profile, error=report["calibrated"]), report)


def mean_gap(result: RequestResult) -> float:
    count = sum(c for _, c in result.itl_gaps)
    return sum(g * c for g, c in result.itl_gaps) / count if count else 0.0


def ape(forecast: float, measured: float) -> float:
    """The absolute error of a forecast as a share of the measured value."""
    return abs(forecast - measured) / measured if measured else 0.0


def mean_or_none(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None
