"""`pdctl bench` keeps the answering engine's per-request timing when the response carries it
(vLLM's --enable-per-request-metrics: `metrics` on the usage chunk), and sums it up beside the
client's own figures; a run without it has no `engine_metrics`."""

from __future__ import annotations

import json

import pytest

from bench.records import RequestRecord, SloTargets
from bench.sse import parse_line
from bench.summary import summarize

USAGE = {"prompt_tokens": 4, "completion_tokens": 8, "total_tokens": 12}


def usage_line(metrics: object) -> str:
    return "data: " + json.dumps({"choices": [], "usage": USAGE, "metrics": metrics})


def test_the_usage_chunk_metrics_are_read():
    sent = {
        "time_to_first_token_ms": 41.5,
        "generation_time_ms": 70.0,
        "queue_time_ms": 0.5,
        "mean_itl_ms": 10.0,
        "tokens_per_second": 60.0,
    }
    event = parse_line(usage_line(sent))
    assert event.completion_tokens == 8
    assert event.engine_metrics == {
        "queue_time_ms": 0.5,
        "time_to_first_token_ms": 41.5,
        "mean_itl_ms": 10.0,
    }


@pytest.mark.parametrize(
    "metrics", [None, {}, "fast", {"queue_time_ms": "1"}, {"mean_itl_ms": True}]
)
def test_absent_or_odd_metrics_are_none(metrics):
    assert parse_line(usage_line(metrics)).engine_metrics is None


def record(ttft_s: float, engine: dict | None) -> RequestRecord:
    return RequestRecord(
        ok=True, output_tokens=8, ttft=ttft_s, itl=[0.01] * 7, e2el=ttft_s + 0.07,
        engine_metrics=engine,
    )  # fmt: skip


def test_the_summary_gives_the_engines_medians_and_what_came_before_them():
    timed = [
        record(0.200, {"queue_time_ms": 1.0, "time_to_first_token_ms": 50.0, "mean_itl_ms": 9.0}),
        record(0.300, {"queue_time_ms": 3.0, "time_to_first_token_ms": 60.0, "mean_itl_ms": 11.0}),
        record(0.250, {"queue_time_ms": 2.0, "time_to_first_token_ms": 55.0, "mean_itl_ms": 10.0}),
        record(0.900, None),  # an answer without metrics is not counted in them
    ]
    got = summarize(timed, 1.0, SloTargets())["engine_metrics"]
    assert got["requests"] == 3
    assert got["median_queue_time_ms"] == pytest.approx(2.0)
    assert got["median_ttft_ms"] == pytest.approx(55.0)
    assert got["median_mean_itl_ms"] == pytest.approx(10.0)
    # client TTFT less the engine's queue and TTFT: 149, 237, 193
    assert got["median_before_engine_ms"] == pytest.approx(193.0)
    assert "answering engine" in got["source"]


def test_a_run_without_engine_metrics_has_none():
    assert "engine_metrics" not in summarize([record(0.2, None)], 1.0, SloTargets())
