"""The forecast's baseline is the figure the page shows: the measured value of the watched
signal, moved by the planner's change; where the planner's own figure for the running layout
differs (37 ms planned, 64.8 ms measured), the forecast says why."""

from __future__ import annotations

import pytest

from services.proposal_forecast import on_measured


def test_the_baseline_is_the_measured_figure_and_the_planners_change_moves_it():
    got = on_measured("ttft_p99_ms", 64.8, 37.0, 18.5, 4.0)
    assert got["baseline"] == 64.8
    assert got["expected"] == pytest.approx(32.4)
    note = got["baseline_note"]
    assert note.startswith(
        "the planner puts the layout that runs now at 37 where 64.8 was measured"
    )
    assert "60 requests of the window's mean prompt and answer lengths at 4 req/s" in note


def test_a_planner_figure_close_to_the_measured_one_needs_no_note():
    got = on_measured("ttft_p99_ms", 40.0, 37.0, 18.5, 4.0)
    assert got["baseline"] == 40.0 and got["baseline_note"] is None


def test_attainment_moves_by_the_planners_difference_within_0_and_1():
    got = on_measured("slo_attainment", 0.9, 0.5, 0.8, None)
    assert got["expected"] == 1.0 and got["baseline"] == 0.9


def test_without_a_measurement_the_planners_figures_stand():
    got = on_measured("ttft_p99_ms", None, 37.0, 18.5, 4.0)
    assert got == {"baseline": 37.0, "expected": 18.5, "baseline_note": None}
