"""`make bench-autopilot`'s report (benchmarks/autopilot.py): attainment per arrival minute,
the dry-run baseline beside the live run, and the moves each made or would have made."""

from __future__ import annotations

import argparse
import re

import pytest

from benchmarks.autopilot import SLO, moves_of, per_minute, phase_shape, side_by_side


def _request(start: float, ttft: float | None, ok: bool = True) -> dict:
    return {"start": start, "ok": ok, "ttft": ttft, "itl": [0.05, 0.06]}


def test_attainment_per_minute_is_by_arrival_across_both_phases() -> None:
    late = SLO["ttft_ms"] / 1000 + 1  # over the TTFT target
    a = {"requests": [_request(1, 0.5), _request(50, late), _request(70, 0.5)]}
    b = {"requests": [_request(5, 0.5, ok=False), _request(20, 0.5)]}
    rows = per_minute([(0.0, a), (100.0, b)], 0.0, 60.0)
    assert rows == [
        {"minute": 0, "requests": 2, "slo_attainment": 0.5},
        {"minute": 1, "requests": 2, "slo_attainment": 0.5},  # 70 s, and B's failed one at 105
        {"minute": 2, "requests": 1, "slo_attainment": 1.0},
    ]


def test_the_baseline_stands_beside_each_live_minute_and_dry_moves_say_would() -> None:
    live = {
        "per_minute": [
            {"minute": 0, "requests": 10, "slo_attainment": 0.4},
            {"minute": 1, "requests": 12, "slo_attainment": 0.75},
        ],
        "moves": [
            {"at_s": 119.0, "after_shift_s": -61.0, "instance": "decode-1", "from": "decode",
             "to": "prefill", "revision": 2},
        ],
    }  # fmt: skip
    baseline = {"per_minute": [{"minute": 0, "requests": 10, "slo_attainment": 0.5}]}
    lines = side_by_side(live, baseline)
    assert lines[0] == "  minute 0: 10 requests, SLO attainment 40%; dry run 50% of 10"
    assert lines[1] == "  minute 1: 12 requests, SLO attainment 75%"  # no baseline minute 1
    assert side_by_side(live, None)[0] == "  minute 0: 10 requests, SLO attainment 40%"
    assert moves_of(live) == [
        "  move at 119.0 s (-61.0 s from the shift): decode-1 decode -> prefill (revision 2)"
    ]
    dry = {**live, "dry_run": True}
    assert moves_of(dry)[0].startswith("  would move at 119.0 s")
    assert "revision" not in moves_of(dry)[0]


def test_a_phase_shape_is_rate_prompt_and_answer_and_a_bad_one_says_what_it_takes() -> None:
    assert phase_shape("0.9,4500,16") == (0.9, 4500, 16)
    for bad, said in (
        ("1,2", "expected RATE,IN,OUT"),
        ("fast,1,1", "expected RATE,IN,OUT"),
        ("0,100,10", "rate in (0, 50]"),
        ("1,0,10", "IN 1-100000"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(said)):
            phase_shape(bad)
