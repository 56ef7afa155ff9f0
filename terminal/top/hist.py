"""The TTFT and ITL histograms of `pdctl top` as text: one row per bucket (its upper bound,
a bar, the count), p50/p90/p99 marked on the row they fall in, and the SLO as a line between
the buckets within it and those past it. Pure: a frame's Histogram in, lines out.

Only the buckets that matter are shown (the data's range, one empty bucket either side, and
the SLO's boundary); when the rows do not fit, the adjacent pair with the fewest requests
is merged (never across the SLO line) until they do."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from terminal.top.format import Glyphs, clip, count, millis, seconds_as_ms

LABEL_W, COUNT_W, MARK_W = 8, 5, 9
QUANTILES = ("p50", "p90", "p99")
HEAD_ROWS = 2  # the title and the percentiles
SIDE_BY_SIDE_MIN = 70  # below this width the two histograms are stacked


@dataclass(frozen=True)
class Bucket:
    lo: float
    hi: float  # inf for the +Inf bucket
    count: float


def buckets_of(h: Mapping[str, Any] | None) -> list[Bucket]:
    """The frame's [[bound or null, count], ...] as contiguous buckets from 0."""
    out, lo = [], 0.0
    for bound, n in (h or {}).get("buckets") or []:
        hi = math.inf if bound is None else float(bound)
        out.append(Bucket(lo, hi, float(n or 0)))
        lo = hi
    return out


def slo_split(buckets: Sequence[Bucket], slo_s: float | None) -> int | None:
    """How many buckets lie wholly within the SLO (the line goes after them); None: no SLO."""
    if slo_s is None:
        return None
    return sum(1 for b in buckets if b.hi <= slo_s + 1e-12)


def shown_range(buckets: Sequence[Bucket], split: int | None) -> tuple[int, int]:
    """[first, last) of the buckets worth a row: the data, one empty bucket either side, and
    the buckets either side of the SLO line."""
    full = [i for i, b in enumerate(buckets) if b.count > 0]
    first, last = (full[0], full[-1]) if full else (0, min(len(buckets) - 1, 8))
    first, last = max(0, first - 1), min(len(buckets) - 1, last + 1)
    if split is not None:
        first = min(first, max(0, split - 1))
        last = max(last, min(len(buckets) - 1, split))
    return first, last + 1


def _merge(out: list[Bucket], i: int, keep: int | None) -> int | None:
    """Buckets i and i+1 made one, in place; `keep` (the SLO line's index) moved with it."""
    out[i : i + 2] = [Bucket(out[i].lo, out[i + 1].hi, out[i].count + out[i + 1].count)]
    return keep - 1 if keep is not None and i + 1 < keep else keep


def _mergeable(out: list[Bucket], keep: int | None) -> list[int]:
    return [i for i in range(len(out) - 1) if keep is None or i + 1 != keep]


def collapse_empty(buckets: list[Bucket], keep: int | None) -> tuple[list[Bucket], int | None]:
    """Each run of empty buckets as one row (not across the SLO line at index `keep`)."""
    out = list(buckets)
    while runs := [i for i in _mergeable(out, keep) if out[i].count == out[i + 1].count == 0]:
        keep = _merge(out, runs[0], keep)
    return out, keep


def merge_to(buckets: list[Bucket], rows: int, keep: int | None) -> tuple[list[Bucket], int | None]:
    """`buckets` merged down to `rows` (at least 1): the adjacent pair holding the fewest
    requests first, never the pair either side of index `keep` (the SLO line)."""
    out = list(buckets)
    while len(out) > max(1, rows) and (pairs := _mergeable(out, keep)):
        i = min(pairs, key=lambda j: out[j].count + out[j + 1].count)
        keep = _merge(out, i, keep)
    return out, keep


@dataclass(frozen=True)
class Shown:
    """The rows worth showing of one histogram, and where the SLO line goes among them
    (before row `line_at`; its length: after the last; None: no SLO)."""

    buckets: list[Bucket]
    line_at: int | None


def shown(h: Mapping[str, Any], slo_ms: float | None) -> Shown | None:
    """None when the histogram holds nothing."""
    buckets = buckets_of(h)
    if not buckets or not h.get("count"):
        return None
    split = slo_split(buckets, None if slo_ms is None else slo_ms / 1000)
    first, last = shown_range(buckets, split)
    part, line_at = collapse_empty(buckets[first:last], None if split is None else split - first)
    return Shown(part, line_at)


def marks_in(b: Bucket, h: Mapping[str, Any]) -> str:
    """The percentiles in (lo, hi]: 'p50', 'p90/99', 'p50/90/99'."""
    found = [q for q in QUANTILES if (v := h.get(q)) is not None and b.lo < v <= b.hi]
    if not found and b.lo == 0:  # a percentile of exactly 0 belongs to the first bucket
        found = [q for q in QUANTILES if h.get(q) == 0]
    return "p" + "/".join(q[1:] for q in found) if found else ""


def bar(n: float, top: float, width: int, g: Glyphs) -> str:
    if top <= 0 or width <= 0:
        return ""
    eighths = round(n / top * width * 8)
    if n > 0 and eighths == 0:
        eighths = 1  # a bucket with requests is never drawn empty
    whole, part = divmod(eighths, 8)
    tail = g.parts[part - 1] if part and g.parts else (g.full if part >= 4 else "")
    return (g.full * whole + tail)[:width]


def bound_label(hi: float, g: Glyphs) -> str:
    return "+Inf" if math.isinf(hi) else g.at_most + millis(hi * 1000)


def percentiles(h: Mapping[str, Any]) -> str:
    return "  ".join(f"{q} {seconds_as_ms(h.get(q))}" for q in QUANTILES)


def pane(
    title: str, h: Mapping[str, Any] | None, slo_ms: float | None, width: int, rows: int, g: Glyphs
) -> list[str]:
    """At most `rows` lines, each at most `width` wide, of one histogram."""
    h = h or {}
    head = [f"{title}  {count(h.get('count') or 0)} in the window", percentiles(h)]
    lines = head + body(h, slo_ms, width, rows - len(head), g)
    return [clip(line, width, g) for line in lines[:rows]]


def body(h: Mapping[str, Any], slo_ms: float | None, width: int, rows: int, g: Glyphs) -> list[str]:
    if rows <= 0:
        return []
    rows_of = shown(h, slo_ms)
    if rows_of is None:
        return ["no requests in the window"]
    with_line = rows_of.line_at is not None and rows > 1
    part, line_at = merge_to(rows_of.buckets, rows - with_line, rows_of.line_at)
    top = max(b.count for b in part)
    bar_w = max(1, width - LABEL_W - COUNT_W - MARK_W - 3)
    out = []
    for i, b in enumerate(part):
        if with_line and i == line_at:
            out.append(slo_line(slo_ms, width, g))
        out.append(
            f"{bound_label(b.hi, g):>{LABEL_W}} {bar(b.count, top, bar_w, g):<{bar_w}} "
            f"{count(b.count):>{COUNT_W}} {marks_in(b, h)}"
        )
    if with_line and line_at == len(part):
        out.append(slo_line(slo_ms, width, g))
    return out


def slo_line(slo_ms: float | None, width: int, g: Glyphs) -> str:
    text = f"{g.rule * 2} SLO {millis(slo_ms or 0)} "
    return text + g.rule * max(0, width - len(text) - MARK_W)


def wanted(h: Mapping[str, Any] | None, slo_ms: float | None) -> int:
    """The rows one histogram fills unmerged, its two head lines included."""
    rows_of = shown(h or {}, slo_ms)
    if rows_of is None:
        return HEAD_ROWS + 1
    return HEAD_ROWS + len(rows_of.buckets) + (rows_of.line_at is not None)


def histograms(frame: Mapping[str, Any], width: int, rows: int, g: Glyphs) -> list[str]:
    """TTFT and ITL side by side when the width allows, else one above the other."""
    slo = frame.get("slo") or {}
    parts = (
        ("TTFT", frame.get("ttft"), slo.get("ttft_ms")),
        ("ITL", frame.get("itl"), slo.get("itl_ms")),
    )
    if width < SIDE_BY_SIDE_MIN and rows < 2 * (HEAD_ROWS + 1):  # no room for a bucket row
        lines = [
            f"{t} {percentiles(h or {})}  ({count((h or {}).get('count') or 0)})"
            for t, h, _ in parts
        ]
        return [clip(line, width, g) for line in lines[:rows]]
    if width >= SIDE_BY_SIDE_MIN:
        half = (width - 2) // 2
        left, right = (pane(t, h, s, half, rows, g) for t, h, s in parts)
        n = max(len(left), len(right))
        left += [""] * (n - len(left))
        right += [""] * (n - len(right))
        return [clip(f"{a:<{half}}  {b}", width, g) for a, b in zip(left, right, strict=True)]
    want_top = wanted(parts[0][1], parts[0][2])
    top_rows = min(want_top, max(rows - wanted(parts[1][1], parts[1][2]), (rows + 1) // 2))
    return pane(*parts[0], width, top_rows, g) + pane(*parts[1], width, rows - top_rows, g)


def histograms_wanted(frame: Mapping[str, Any], width: int) -> int:
    slo = frame.get("slo") or {}
    each = [
        wanted(frame.get("ttft"), slo.get("ttft_ms")),
        wanted(frame.get("itl"), slo.get("itl_ms")),
    ]
    return max(each) if width >= SIDE_BY_SIDE_MIN else sum(each)
