"""The window's slowest requests and the parts per time bucket, from the proxy's request log."""

from __future__ import annotations

import pytest

from domain.measures.ttft_parts import TtftParts
from observe.ttft_breakdown import recomputing_decodes, series, slowest, window_rows

NOW = 1_000.0


def line(at: float, ttft_ms: float, transfer_ms: float | None, rid: str = "r") -> dict:
    decode_ms = ttft_ms - 1.0 - 40.0 - (transfer_ms or 0.0)
    parts = TtftParts(
        0.001,
        0.0,
        0.040,
        None if transfer_ms is None else transfer_ms / 1000,
        decode_ms / 1000,
        None if transfer_ms is None else "engine",
    )
    return {
        "time": at,
        "request_id": rid,
        "outcome": "ok",
        "group": "read",
        "ttft_ms": ttft_ms,
        "ttft_parts": parts.to_json(),
    }


def test_only_the_window_and_served_requests_count():
    old = line(NOW - 120, 500, 10)
    failed = {**line(NOW - 5, 900, 10), "outcome": "failed"}
    no_parts = {"time": NOW - 5, "outcome": "ok", "ttft_ms": 800}
    canary = {**line(NOW - 5, 700, 10), "canary": True}
    rows = window_rows([old, failed, no_parts, canary, line(NOW - 5, 100, 10)], NOW, 60, None)
    assert len(rows) == 1


def test_slowest_first_with_each_part_and_where_the_transfer_came_from():
    entries = [
        line(NOW - 30, 100, 10, "a"),
        line(NOW - 20, 300, None, "b"),
        line(NOW - 10, 200, 20, "c"),
    ]
    rows = slowest(window_rows(entries, NOW, 60, xfer_p50_ms=50.0), 2)
    assert [r["request_id"] for r in rows] == ["b", "c"]
    b = rows[0]
    assert b["transfer_source"] == "estimate" and b["transfer"] == pytest.approx(50.0)
    assert b["queue"] + b["retry"] + b["prefill"] + b["transfer"] + b["decode"] == pytest.approx(
        300
    )
    assert rows[1]["transfer_source"] == "engine" and rows[1]["transfer"] == pytest.approx(20.0)


def test_without_a_transfer_histogram_the_transfer_stays_unknown():
    rows = slowest(window_rows([line(NOW - 1, 300, None)], NOW, 60, None))
    assert rows[0]["transfer"] is None and rows[0]["transfer_source"] is None


def test_a_request_its_decode_recomputed_moved_no_kv_rather_than_an_estimated_transfer():
    frame = {
        "instances": [
            {"name": "decode-0", "url": "http://d0"},
            {"name": "decode-1", "url": "http://d1"},
        ],
        "pd": {
            "decodes": [
                {"instance": "decode-0", "status": "recomputing", "since": NOW - 15},
                {"instance": "decode-1", "status": "ok", "since": None},
            ]
        },
    }
    recomputing = recomputing_decodes(frame)
    assert recomputing == {"http://d0": NOW - 15}
    entries = [
        {**line(NOW - 10, 300, None, "after"), "decode": "http://d0"},
        {**line(NOW - 20, 300, None, "before"), "decode": "http://d0"},  # before the onset
        {**line(NOW - 10, 300, None, "healthy"), "decode": "http://d1"},
        {**line(NOW - 5, 300, 12, "measured"), "decode": "http://d0"},  # the engine's own
    ]
    rows = {r["request_id"]: r for r in slowest(window_rows(entries, NOW, 60, 50.0, recomputing))}
    after = rows["after"]
    assert after["transfer_source"] == "recomputed" and after["transfer"] == 0.0
    assert after["queue"] + after["retry"] + after["prefill"] + after["decode"] == pytest.approx(
        300
    )
    assert rows["before"]["transfer_source"] == "estimate"
    assert rows["healthy"]["transfer_source"] == "estimate"
    assert rows["measured"]["transfer_source"] == "engine"
    assert recomputing_decodes(None) == {} and recomputing_decodes({"instances": []}) == {}


def test_series_buckets_the_window_and_averages_each_part():
    entries = [line(NOW - 55, 100, 10), line(NOW - 54, 200, 30), line(NOW - 1, 100, 10)]
    bars = series(window_rows(entries, NOW, 60, None), NOW, 60, buckets=6)
    assert [b["requests"] for b in bars] == [2, 0, 0, 0, 0, 1]
    assert bars[0]["transfer"] == pytest.approx(20.0)
    assert bars[0]["ago_s"] == 60 and bars[-1]["ago_s"] == pytest.approx(10)
    assert bars[1]["decode"] == 0.0
