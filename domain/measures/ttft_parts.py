"""Where one request's TTFT went: pure arithmetic over the proxy's clock and, for the transfer,
the decode's own figures. The parts add up to the TTFT exactly:

- queue: arrival -> the first attempt starts (body read, a render tier's call,
  hold/admission); proxy clock.
- retry: the first attempt starts -> the serving attempt starts (failed attempts and their
  backoff); proxy clock; 0 without a retry.
- prefill: the serving attempt starts -> the prefill's answer (or the first token, if that came
  first; in write mode the decode leg runs meanwhile, so this is the time both legs overlap);
  proxy clock; None for a colocated request.
- transfer: the part of the decode's wait (the prefill's answer -> first token) spent waiting
  for KV. From the decode's own per-request figures when it reports them (`kv_transfer_stats`,
  source "engine"): its wait minus the engine's KV-ready-to-first-token, capped by the engine's
  KV wait (in read mode this is the KV wait; in write mode the tail of the push that outlasted
  the prefill's answer). Otherwise an estimate from the window's transfer-time histogram
  (`with_estimate`, source "estimate"), or None; 0 for a request its decode recomputed (the
  "is PD happening?" check says so: `without_transfer`, source "recomputed").
- decode: the rest of the decode's wait (decode queue, first decode step, the hops); for a
  colocated request, everything after the attempt started.

How a client asks the proxy for its TTFT's parts, and how they come back: one spelling for
the proxy (connector/dispatch/flight.py) and `pdctl bench` (bench/sse.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A request carrying this header gets its parts after its stream's `data: [DONE]`.
PARTS_HEADER = "X-Pdctl-Ttft-Parts"
# ... as one SSE comment line: this prefix, then a JSON object (`TtftParts.to_json`).
PARTS_COMMENT = ": ttft_parts "

PARTS = ("queue", "retry", "prefill", "transfer", "decode")
SOURCES = ("engine", "estimate", "recomputed")


@dataclass(frozen=True, slots=True)
class EngineTransfer:
    """A decode's own figures for one request's KV transfer, in seconds."""

    kv_wait: float
    xfer_time: float
    ready_to_first_token: float

    @classmethod
    def from_json(cls, stats: Any) -> EngineTransfer | None:
        """Read a response's `kv_transfer_stats`; None when absent or not numbers."""
        if not isinstance(stats, dict):
            return None
        try:
            return cls(
                float(stats["kv_wait_s"]),
                float(stats["xfer_time_s"]),
                float(stats["ready_to_first_token_s"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class TtftParts:
    """One request's TTFT split; seconds. `transfer_source` says where the transfer came from."""

    queue: float
    retry: float
    prefill: float | None
    transfer: float | None
    decode: float
    transfer_source: str | None = None

    @property
    def total(self) -> float:
        return (
            self.queue + self.retry + (self.prefill or 0.0) + (self.transfer or 0.0) + self.decode
        )

    def to_json(self) -> dict[str, Any]:
        """Milliseconds, for the request log, the bench and the dashboard."""
        return {
            "queue_ms": self.queue * 1000,
            "retry_ms": self.retry * 1000,
            "prefill_ms": None if self.prefill is None else self.prefill * 1000,
            "transfer_ms": None if self.transfer is None else self.transfer * 1000,
            "decode_ms": self.decode * 1000,
            "transfer_source": self.transfer_source,
        }


def split(
    arrival: float,
    first_attempt: float,
    attempt: float,
    prefill_end: float | None,
    first_token: float,
    engine: EngineTransfer | None = None,
) -> TtftParts:
    """The parts of `first_token - arrival` (all times on the proxy's one clock)."""
    queue = max(0.0, first_attempt - arrival)
    retry = max(0.0, attempt - max(first_attempt, arrival))
    start = max(attempt, arrival)
    first_token = max(first_token, start)
    if prefill_end is None:  # colocated, or no prefill answer: all of it is the decode's
        return TtftParts(queue, retry, None, None, first_token - start)
    answered = min(max(prefill_end, start), first_token)
    wait = first_token - answered
    if engine is None:
        return TtftParts(queue, retry, answered - start, None, wait)
    transfer = _clamp(wait - engine.ready_to_first_token, 0.0, min(engine.kv_wait, wait))
    return TtftParts(queue, retry, answered - start, transfer, wait - transfer, "engine")


def with_estimate(parts: TtftParts, mean_xfer: float | None) -> TtftParts:
    """A request its decode reported nothing for: its transfer estimated as the window's mean
    transfer time (vllm:nixl_xfer_time_seconds / vllm:moriio_xfer_time_seconds), capped by the
    decode's wait, and labelled "estimate". A measured one is left as it is."""
    if parts.transfer_source is not None or parts.prefill is None or mean_xfer is None:
        return parts
    wait = (parts.transfer or 0.0) + parts.decode
    transfer = _clamp(mean_xfer, 0.0, wait)
    return TtftParts(parts.queue, parts.retry, parts.prefill, transfer, wait - transfer, "estimate")


def without_transfer(parts: TtftParts) -> TtftParts:
    """A request served by a decode that recomputes its prompts (observe/sections/pd_check.py): no
    KV
    moved, so none of its wait was a transfer; labelled "recomputed". A measured one is left
    as it is (the engine's own figures say what happened)."""
    if parts.transfer_source is not None or parts.prefill is None:
        return parts
    wait = (parts.transfer or 0.0) + parts.decode
    return TtftParts(parts.queue, parts.retry, parts.prefill, 0.0, wait, "recomputed")


def from_json(entry: dict[str, Any]) -> TtftParts | None:
    """Read back `TtftParts.to_json` (a request-log line's `ttft_parts`)."""
    try:
        return TtftParts(
            entry["queue_ms"] / 1000,
            entry["retry_ms"] / 1000,
            None if entry["prefill_ms"] is None else entry["prefill_ms"] / 1000,
            None if entry["transfer_ms"] is None else entry["transfer_ms"] / 1000,
            entry["decode_ms"] / 1000,
            entry.get("transfer_source"),
        )
    except (KeyError, TypeError):
        return None


def _clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(x, hi))
