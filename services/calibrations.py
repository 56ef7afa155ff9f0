"""A deployment's kept calibration (state/calibration_store.py) as the forecasts read it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from simulator.model.calibration.profile import CalibratedProfile, ProfileError, from_json


@dataclass(frozen=True)
class Kept:
    profile: CalibratedProfile | None = None
    at: datetime | None = None  # when it was kept: a new one is a new timing


def kept_calibration(store: Any, deployment: str) -> Kept:
    """The profile kept for `deployment`; none without a store, a row, or a readable body
    (a profile from a later format is ignored rather than trusted)."""
    if store is None:
        return Kept()
    row = store.get(deployment)
    if row is None:
        return Kept()
    try:
        return Kept(from_json(row.body), row.created_at)
    except ProfileError:
        return Kept(None, row.created_at)
