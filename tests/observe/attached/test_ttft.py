"""observe/attached/ttft.py: an attached deployment's TTFT parts from its engines' own
histograms, means that add up to the prefill's TTFT plus the decode's."""

from __future__ import annotations

import pytest

from observe.attached.ttft import engine_ttft_parts
from observe.metrics.windows import Delta
from tests.observe.attached.test_watch import hist


def engine(**families: list[float]) -> Delta:
    counts: dict = {}
    for name, values in families.items():
        counts |= hist(f"vllm:{name}", values)
    return Delta(10.0, counts)


def test_the_parts_are_each_engines_means_and_add_up_to_both_ttfts():
    queue, compute = [0.01, 0.03], [0.12, 0.14]  # the prefill: arrival -> its one token
    prefill = engine(
        request_queue_time_seconds=queue,
        request_prefill_time_seconds=compute,
        time_to_first_token_seconds=[q + c for q, c in zip(queue, compute, strict=True)],
    )
    # a decode leg is scheduled once its KV is there: its queue time holds the transfer
    d_queue, d_first, xfer = [0.03, 0.04], [0.05, 0.07], [0.02, 0.03]
    decode = engine(
        request_queue_time_seconds=d_queue,
        request_prefill_time_seconds=d_first,  # scheduled -> first token: the first step
        nixl_xfer_time_seconds=xfer,
        time_to_first_token_seconds=[q + f for q, f in zip(d_queue, d_first, strict=True)],
    )
    shown = engine_ttft_parts([prefill], [decode])
    parts = shown["parts"]
    assert shown["source"] == "engines"
    assert parts["prefill_queue"] == pytest.approx(20.0)
    assert parts["prefill"] == pytest.approx(130.0)
    assert parts["kv_transfer"] == pytest.approx(25.0)
    assert parts["decode_queue"] == pytest.approx(10.0)  # 35 ms waited, 25 of it for KV
    assert parts["first_decode_step"] == pytest.approx(60.0)
    both = (sum(queue) + sum(compute) + sum(d_queue) + sum(d_first)) / 2 * 1000
    assert shown["sum_ms"] == pytest.approx(both)  # the two legs' mean TTFTs, added


def test_without_a_transfer_histogram_the_decode_wait_stays_one_part():
    decode = engine(request_queue_time_seconds=[0.03], request_prefill_time_seconds=[0.06])
    parts = engine_ttft_parts([], [decode])["parts"]
    assert parts["decode_queue_and_kv"] == pytest.approx(30.0)
    assert parts["first_decode_step"] == pytest.approx(60.0)
    assert "kv_transfer" not in parts and parts["prefill"] is None


def test_a_transfer_longer_than_the_wait_is_capped_by_it():
    decode = engine(request_queue_time_seconds=[0.01], nixl_xfer_time_seconds=[0.05])
    parts = engine_ttft_parts([], [decode])["parts"]
    assert parts["kv_transfer"] == pytest.approx(10.0) and parts["decode_queue"] == 0.0


def test_an_idle_window_has_no_parts():
    shown = engine_ttft_parts([Delta(10.0, {})], [Delta(10.0, {})])
    assert shown["sum_ms"] is None and set(shown["parts"].values()) == {None}
