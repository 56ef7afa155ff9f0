"""Where the window's TTFTs went, from the proxy's request log (GET /admin/requests, each line
with its `ttft_parts`, domain/measures/ttft_parts.py): the slowest requests with their parts, and
the mean of each part per time bucket for a stacked chart. Pure: log lines and times in.

A request whose decode reported no transfer figure gets the window's median transfer time
(vllm:nixl_/moriio_xfer_time_seconds, the frame's `kv.xfer_p50_ms`) as its transfer, labelled
"estimate"; with no such histogram its transfer stays unknown (None). A request served by a
decode that recomputes its prompts since before it came ("is PD happening?") moved no KV: its
transfer is 0, labelled "recomputed", not an estimate of a transfer that did not happen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from domain.measures.ttft_parts import PARTS, TtftParts, from_json, with_estimate, without_transfer

SLOWEST = 10
BUCKETS = 12


def window_rows(
    entries: list[dict[str, Any]],
    now: float,
    window_s: float,
    xfer_p50_ms: float | None,
    recomputing: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """The log lines of the last `window_s` seconds (wall clock) that carry parts, each with
    its parts (estimated where the engine said nothing), oldest first. `recomputing`: the URL
    of each decode that recomputes its prompts now -> since when (epoch seconds)."""
    recomputing = recomputing or {}
    mean_xfer = None if xfer_p50_ms is None else xfer_p50_ms / 1000
    rows = []
    for entry in entries:
        at = entry.get("time")
        if not isinstance(at, int | float) or not now - window_s <= at <= now:
            continue
        raw = entry.get("ttft_parts")
        parts = from_json(raw) if isinstance(raw, dict) else None
        # The control plane's canaries are no client's requests (observe/canary/state.py).
        if parts is None or entry.get("outcome") != "ok" or entry.get("canary"):
            continue
        since = recomputing.get(entry.get("decode") or "")
        recomputed = since is not None and at >= since
        parts = without_transfer(parts) if recomputed else with_estimate(parts, mean_xfer)
        rows.append({"entry": entry, "parts": parts})
    return rows


def recomputing_decodes(frame: Mapping[str, Any] | None) -> dict[str, float]:
    """From a live frame: the URL of each decode the PD check finds recomputing -> since."""
    if not frame:
        return {}
    urls = {i["name"]: i.get("url") for i in frame.get("instances") or []}
    pd = frame.get("pd") or {}
    return {
        urls[d["instance"]]: d["since"]
        for d in pd.get("decodes") or []
        if d.get("status") == "recomputing"
        and d.get("since") is not None
        and urls.get(d["instance"])
    }


def slowest(rows: list[dict[str, Any]], n: int = SLOWEST) -> list[dict[str, Any]]:
    """The `n` slowest by TTFT, slowest first: id, pair, TTFT and each part in ms."""
    ranked = sorted(rows, key=lambda r: r["entry"].get("ttft_ms") or 0.0, reverse=True)
    out = []
    for row in ranked[:n]:
        entry, parts = row["entry"], row["parts"]
        out.append(
            {
                "time": entry["time"],
                "request_id": entry.get("request_id", ""),
                "group": entry.get("group"),
                "prefill": entry.get("prefill"),
                "decode": entry.get("decode"),
                "ttft_ms": entry.get("ttft_ms"),
                **_ms(parts),
                "transfer_source": parts.transfer_source,
            }
        )
    return out


def series(
    rows: list[dict[str, Any]], now: float, window_s: float, buckets: int = BUCKETS
) -> list[dict[str, Any]]:
    """Per time bucket of the window: its start (s before now), requests, mean of each part."""
    width = window_s / buckets
    sums = [dict.fromkeys(PARTS, 0.0) for _ in range(buckets)]
    counts = [0] * buckets
    for row in rows:
        i = min(buckets - 1, max(0, int((row["entry"]["time"] - (now - window_s)) / width)))
        counts[i] += 1
        for part, value in _ms(row["parts"]).items():
            sums[i][part] += value or 0.0
    return [
        {
            "ago_s": window_s - i * width,
            "requests": counts[i],
            **{p: sums[i][p] / counts[i] if counts[i] else 0.0 for p in PARTS},
        }
        for i in range(buckets)
    ]


def _ms(parts: TtftParts) -> dict[str, float | None]:
    doc = parts.to_json()
    return {p: doc[f"{p}_ms"] for p in PARTS}
