"""Parsing /metrics: cumulative samples apart from gauges, sums over labels, real vLLM text."""

from __future__ import annotations

from pathlib import Path

from observe.build import tracked
from observe.metrics.samples import cumulative_buckets, parse, total
from tests.observe.series import engine_text, proxy_text

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "vllm"


def test_counters_and_histograms_are_cumulative_gauges_are_not() -> None:
    scrape = parse(proxy_text({0.1: 2}, ok=3, in_flight=4))
    assert total(scrape.counters, "pdctl_proxy_requests_total", outcome="ok") == 3
    assert total(scrape.counters, "pdctl_proxy_ttft_seconds_count") == 2
    assert total(scrape.gauges, "pdctl_proxy_in_flight_requests") == 4
    assert total(scrape.counters, "pdctl_proxy_in_flight_requests") is None


def test_buckets_are_summed_over_other_labels_and_sorted_with_inf_last() -> None:
    scrape = parse(proxy_text({0.1: 2, 1.0: 1}))
    buckets = cumulative_buckets(scrape.counters, "pdctl_proxy_ttft_seconds")
    assert buckets[-1] == (float("inf"), 3)
    assert dict(buckets)[0.1] == 2 and dict(buckets)[0.08] == 0
    assert cumulative_buckets(scrape.counters, "vllm:nope") is None


def test_real_vllm_metrics_parse_with_the_series_the_frame_needs() -> None:
    for role in ("prefill", "decode", "colocated"):
        scrape = parse((FIXTURES / f"{role}_metrics.txt").read_text(), keep=tracked)
        assert total(scrape.gauges, "vllm:num_requests_running") is not None
        assert cumulative_buckets(scrape.counters, "vllm:time_to_first_token_seconds")
        assert (
            total(
                scrape.counters, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer"
            )
            is not None
        )
        assert not any(name.endswith("_created") for name, _ in scrape.counters)
    decode = parse((FIXTURES / "decode_metrics.txt").read_text(), keep=tracked)
    assert cumulative_buckets(decode.counters, "vllm:nixl_xfer_time_seconds")


def test_engine_series_helper_matches_labels() -> None:
    scrape = parse(engine_text(external_tokens=7, running=2))
    assert (
        total(scrape.counters, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer")
        == 7
    )
    assert total(scrape.counters, "vllm:prompt_tokens_by_source_total") == 12
