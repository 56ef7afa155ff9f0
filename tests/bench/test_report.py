"""The --result-json document and the printed tables."""

from __future__ import annotations

import io
import json
import math

from rich.console import Console

from bench.records import RequestRecord, SloTargets
from bench.report import (
    lag_warning,
    partial_document,
    result_document,
    summary_table,
    sweep_table,
)
from bench.summary import summarize


def _summary(rate: float, ok: bool = True, lag_ms: float = 0.5) -> dict[str, object]:
    record = RequestRecord(ok=ok, prompt_tokens=4, output_tokens=2, ttft=0.1, itl=[0.01], e2el=0.2)
    summary: dict[str, object] = {
        "request_rate": rate,
        "event_loop_lag_max_ms": lag_ms,
        "event_loop_lag_p99_ms": lag_ms / 2,
        "event_loop_lag_flagged": lag_ms > 5,
    }
    summary.update(summarize([record], 1.0, SloTargets(ttft_ms=500, itl_ms=50)))
    return summary


def _render(table: object) -> str:
    console = Console(width=200, file=io.StringIO())
    console.print(table)
    return console.file.getvalue()


def test_single_rate_document_is_flat_like_vllm_and_json_safe() -> None:
    record = RequestRecord(ok=True, output_tokens=2, ttft=0.1, itl=[0.01], e2el=0.2)
    document = result_document([_summary(math.inf)], [[record]], 0.9, save_requests=False)
    assert document["request_rate"] == "inf"
    assert document["max_goodput_rate"] == "inf"
    assert document["completed"] == 1
    assert "requests" not in document
    json.loads(json.dumps(document, allow_nan=False))


def test_save_requests_adds_per_request_records() -> None:
    records = [
        RequestRecord(ok=True, prompt_tokens=4, output_tokens=2, ttft=0.1, itl=[0.01], e2el=0.2),
        RequestRecord(ok=False, error="HTTP 500: boom", prompt_tokens=4),
    ]
    document = result_document([_summary(2.0)], [records], 0.9, save_requests=True)
    assert document["errors"] == ["", "HTTP 500: boom"]
    assert document["ttfts"] == [0.1, 0.0]
    assert document["requests"][1]["error"] == "HTTP 500: boom"
    assert document["requests"][0]["itl"] == [0.01]


def test_sweep_document_lists_runs_and_max_goodput_rate() -> None:
    summaries = [_summary(1.0), _summary(2.0), _summary(4.0, ok=False)]
    document = result_document(summaries, [[], [], []], 0.9, save_requests=False)
    assert [run["request_rate"] for run in document["runs"]] == [1.0, 2.0, 4.0]
    assert document["max_goodput_rate"] == 2.0
    text = _render(sweep_table(document))
    assert "max_goodput_rate 2 req/s" in text
    assert "100.0%" in text and "0.0%" in text


def test_sweep_table_says_each_rates_rejected_share() -> None:
    refused = RequestRecord(ok=False, error="HTTP 503", status=503)
    ok = RequestRecord(ok=True, prompt_tokens=4, output_tokens=2, ttft=0.1, itl=[0.01], e2el=0.2)
    run = {**_summary(8.0), **summarize([ok, refused, refused, refused], 1.0, SloTargets())}
    document = result_document([_summary(1.0), run], [[], []], 0.9, save_requests=False)
    rows = [line for line in _render(sweep_table(document)).splitlines() if "/" in line]
    assert any("1/3" in row and "75.0%" in row and "25.0%" in row for row in rows), rows
    old = {k: v for k, v in _summary(1.0).items() if not k.startswith("rejected")}
    text = _render(sweep_table(result_document([old, old], [[], []], 0.9, False)))
    assert " - " in text  # a stored run from before the count


def test_a_partial_document_is_a_sweep_of_the_rates_measured_and_says_so() -> None:
    one = partial_document([_summary(1.0)], [[]], 0.9, save_requests=False, rates=3)
    assert [run["request_rate"] for run in one["runs"]] == [1.0]  # a sweep's shape, even for one
    assert one["partial"] == {"rates_done": 1, "rates": 3}
    assert one["max_goodput_rate"] == 1.0  # over the rates measured
    two = partial_document(
        [_summary(1.0), _summary(math.inf, ok=False)], [[], []], 0.9, save_requests=False, rates=3
    )
    assert two["runs"][1]["request_rate"] == "inf"
    json.loads(json.dumps(two, allow_nan=False))
    assert "partial" not in result_document([_summary(1.0)] * 3, [[]] * 3, 0.9, False)


def test_summary_table_shows_vllm_rows_and_attainment() -> None:
    text = _render(summary_table(_summary(3.0)))
    for row in ("Successful requests", "Request goodput", "P99 ITL (ms)", "SLO attainment"):
        assert row in text
    assert "of them rejected (503, 429)" in text and "0 (0.0% of requests)" in text


def test_summary_table_says_the_rejected_share_and_an_old_run_did_not_count() -> None:
    summary = {**_summary(3.0), "failed": 9, "rejected": 8, "rejected_share": 0.8}
    assert "8 (80.0% of requests)" in _render(summary_table(summary))
    old = {k: v for k, v in _summary(3.0).items() if not k.startswith("rejected")}
    assert "not counted" in _render(summary_table(old))


def test_lag_warning_only_for_flagged_runs() -> None:
    assert lag_warning(_summary(1.0, lag_ms=1.0)) is None
    warning = lag_warning(_summary(1.0, lag_ms=9.0))
    assert warning is not None and "9.0 ms" in warning and "50 ms ITL target" in warning
