"""What the observer is told before it scrapes: its cadence and timeouts, an attached
deployment's stand-in for a supervised one, and the KV bytes per token of a known model."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True, slots=True)
class ObserveSettings:
    interval: float = 1.0
    timeout: float = 0.8
    history_step_s: float = 5.0
    retention_s: float = 24 * 3600.0
    attach_hosts: tuple[str, ...] = ()  # hosts beyond loopback discovery may add (as specs')


@dataclass(frozen=True, slots=True)
class AttachedView:
    """An attached deployment as the canary reads a supervised one: its spec, no token."""

    spec: Any
    admin_token: str | None = None


@cache
def kv_bytes_per_token(model: str) -> int | None:
    """KV bytes per token of a profile named `model` or whose hf_id is `model`."""
    from domain import profiles

    for name in profiles.available("models"):
        profile = profiles.model(name)
        if model in (name, profile.hf_id):
            return profile.kv_bytes_per_token
    return None
