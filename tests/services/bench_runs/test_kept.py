"""What a bench run that did not finish keeps: the measured rates of the result file its sweep
left, or nothing (no crash) when the file is missing, torn or not the bench's; and the words
that say how many of how many rates were kept."""

from __future__ import annotations

import json

import pytest

from services.bench_runs.kept import kept_note, kept_result


def measured(*rates: float, of: int) -> dict:
    """A sweep's file after len(rates) of `of` rates (bench/report.py `partial_document`)."""
    return {
        "goodput_share": 0.9,
        "max_goodput_rate": rates[0],
        "partial": {"rates_done": len(rates), "rates": of},
        "runs": [
            {"request_rate": r, "completed": 6, "failed": 0, "slo_attainment": 1.0} for r in rates
        ],
    }


def test_a_file_with_k_measured_rates_keeps_them() -> None:
    document = measured(2.0, 4.0, 8.0, of=5)
    kept = kept_result(json.dumps(document))
    assert kept == document
    assert kept_note(kept, 5) == "after 3 of 5 rates; kept 3"


def test_a_single_rate_document_is_one_rate() -> None:
    flat = {"request_rate": 2.0, "completed": 6, "slo_attainment": 1.0}
    assert kept_note(kept_result(json.dumps(flat)), 1) == "after 1 of 1 rate; kept 1"


@pytest.mark.parametrize(
    "text",
    [
        None,  # no file: stopped before its first rate ended
        "",
        json.dumps(measured(2.0, 4.0, of=5))[:57],  # torn: what a non-atomic writer could leave
        "[1, 2]",
        '{"runs": []}',
        '{"runs": "2.0"}',
        '{"runs": [1, 2]}',
        '{"runs": [{"completed": 6}]}',
        '"just a string"',
        "NaN-free nonsense {",
    ],
)
def test_a_missing_torn_or_foreign_file_keeps_nothing(text: str | None) -> None:
    assert kept_result(text) is None


@pytest.mark.parametrize(
    ("offered", "note"),
    [
        (1, "after 0 of 1 rate; kept none"),
        (4, "after 0 of 4 rates; kept none"),
    ],
)
def test_nothing_kept_says_so(offered: int, note: str) -> None:
    assert kept_note(None, offered) == note
