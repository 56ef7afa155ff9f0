"""The deployment spec's `canary` section: how often the correctness canary
(observe/canary/state.py)
sends its fixed greedy prompt through the proxy, and how many tokens it asks for."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_INTERVAL_S = 30.0  # one 16-token request per 30 s: negligible load, a fault seen in 30 s
MIN_INTERVAL_S = 1.0


class CanaryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # Seconds between canaries; 0: off.
    interval_s: float = Field(DEFAULT_INTERVAL_S, ge=0, le=86_400)
    max_tokens: int = Field(16, ge=1, le=256)  # the answer compared, token by token

    @field_validator("interval_s")
    @classmethod
    def _off_or_at_least_a_second(cls, value: float) -> float:
        if 0 < value < MIN_INTERVAL_S:
            raise ValueError(f"must be 0 (off) or at least {MIN_INTERVAL_S:g} s")
        return value
