"""vLLM's phase histograms read from two scrapes: each phase's mean over the requests between."""

from __future__ import annotations

import pytest

from domain.measures.engine_phases import phase_means, phase_totals


def _text(queue: tuple[float, int], prefill: tuple[float, int]) -> str:
    lines = []
    for name, (total, count) in (
        ("vllm:request_queue_time_seconds", queue),
        ("vllm:request_prefill_time_seconds", prefill),
    ):
        lines += [
            f"# TYPE {name} histogram",
            f'{name}_bucket{{engine="0",le="+Inf"}} {count}',
            f'{name}_count{{engine="0"}} {count}',
            f'{name}_sum{{engine="0"}} {total}',
        ]
    lines += ["# TYPE other_total counter", "other_total 3"]
    return "\n".join(lines) + "\n"


def test_means_are_over_the_requests_between_the_scrapes() -> None:
    before = phase_totals(_text((1.0, 10), (2.0, 10)))
    after = phase_totals(_text((1.5, 20), (2.4, 20)))
    means = phase_means(before, after)
    assert means["queue_s"] == pytest.approx(0.05) and means["prefill_s"] == pytest.approx(0.04)
    assert means["requests"] == 10 and "decode_s" not in means


def test_a_server_without_the_histograms_gives_nothing() -> None:
    assert phase_totals("# TYPE other_total counter\nother_total 3\n") == {}
    assert phase_means({}, {}) == {}
