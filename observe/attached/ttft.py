"""Where an attached deployment's TTFT goes, from its engines' own histograms, when no pdctl
proxy stands in front to time each request (observe/ttft_breakdown.py does that from the
proxy's log). Means over the window, because means add exactly: the parts sum to the mean of
the prefill's TTFT plus the decode's, which is the frame's engine-side TTFT. Pure.

The parts, each from the engine that times it (vLLM's histograms; the stand-in's are the same):
- prefill_queue: the prefills' vllm:request_queue_time_seconds (arrival -> scheduled)
- prefill: the prefills' vllm:request_prefill_time_seconds (scheduled -> its one token)
- kv_transfer: the decodes' vllm:nixl_/moriio_xfer_time_seconds (one transfer a request)
- decode_queue: the decodes' vllm:request_queue_time_seconds less kv_transfer. vLLM (and the
  stand-in) schedules a decode leg only once its KV has arrived, so a decode's queue time
  holds its KV wait; what the transfer itself does not explain is waiting for a slot (and the
  handshake). With no transfer histogram the two stay one part, `decode_queue_and_kv`.
- first_decode_step: the decodes' vllm:request_prefill_time_seconds (scheduled -> first
  token)
What no engine times (the proxy's own work, the hops between proxy and engines) is not a
part: the client's TTFT less `sum_ms` is that, when a client measured it (`pdctl bench`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from observe.metrics.samples import total
from observe.metrics.windows import Delta

QUEUE = "vllm:request_queue_time_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
TRANSFERS = ("vllm:nixl_xfer_time_seconds", "vllm:moriio_xfer_time_seconds")
TRACKED = (QUEUE, PREFILL)  # the families the windows must keep for this (observe/build.py)


def engine_ttft_parts(prefills: Sequence[Delta], decodes: Sequence[Delta]) -> dict[str, Any]:
    """The window's mean TTFT parts in ms (None: that engine timed nothing in the window),
    their sum, and `source` "engines"."""
    waited = _mean_ms(decodes, QUEUE)
    transfer = next((m for name in TRANSFERS if (m := _mean_ms(decodes, name)) is not None), None)
    parts: dict[str, float | None] = {
        "prefill_queue": _mean_ms(prefills, QUEUE),
        "prefill": _mean_ms(prefills, PREFILL),
    }
    if transfer is not None and waited is not None:
        moved = min(transfer, waited)
        parts["kv_transfer"], parts["decode_queue"] = moved, waited - moved
    else:
        parts["decode_queue_and_kv"] = waited
    parts["first_decode_step"] = _mean_ms(decodes, PREFILL)
    known = [v for v in parts.values() if v is not None]
    return {"source": "engines", "parts": parts, "sum_ms": sum(known) if known else None}


def _mean_ms(deltas: Sequence[Delta], name: str) -> float | None:
    seconds = sum(total(d.counts, name + "_sum") or 0.0 for d in deltas)
    count = sum(total(d.counts, name + "_count") or 0.0 for d in deltas)
    return 1000 * seconds / count if count > 0 else None
