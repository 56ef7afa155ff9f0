"""The TTFT's parts add up to it, and say where the transfer figure came from."""

from __future__ import annotations

import pytest

from domain.measures.ttft_parts import EngineTransfer, TtftParts, from_json, split, with_estimate


def test_read_mode_transfer_is_the_decodes_kv_wait():
    # arrival 0, attempt 0.01, prefill answers at 0.11, first token at 0.31
    engine = EngineTransfer(kv_wait=0.15, xfer_time=0.15, ready_to_first_token=0.04)
    parts = split(0.0, 0.01, 0.01, 0.11, 0.31, engine)
    assert parts.queue == pytest.approx(0.01)
    assert parts.retry == 0.0
    assert parts.prefill == pytest.approx(0.10)
    assert parts.transfer == pytest.approx(0.15)
    assert parts.decode == pytest.approx(0.05)
    assert parts.transfer_source == "engine"
    assert parts.total == pytest.approx(0.31)


def test_write_mode_transfer_is_only_the_push_that_outlasted_the_prefill():
    # the decode waited 0.30 s for KV (spanning the prefill); after the prefill answered it
    # waited 0.08 s more, 0.03 s of it for its first step
    engine = EngineTransfer(kv_wait=0.30, xfer_time=0.30, ready_to_first_token=0.03)
    parts = split(0.0, 0.0, 0.0, 0.25, 0.33, engine)
    assert parts.prefill == pytest.approx(0.25)
    assert parts.transfer == pytest.approx(0.05)
    assert parts.decode == pytest.approx(0.03)
    assert parts.total == pytest.approx(0.33)


def test_retry_is_its_own_part():
    parts = split(1.0, 1.002, 1.5, 1.6, 1.7)
    assert parts.queue == pytest.approx(0.002)
    assert parts.retry == pytest.approx(0.498)
    assert parts.total == pytest.approx(0.7)


def test_colocated_has_no_prefill_or_transfer():
    parts = split(0.0, 0.001, 0.001, None, 0.2)
    assert parts.prefill is None and parts.transfer is None
    assert parts.decode == pytest.approx(0.199)
    assert parts.total == pytest.approx(0.2)


def test_a_first_token_before_the_prefill_answer_never_goes_negative():
    engine = EngineTransfer(0.1, 0.1, 0.0)
    parts = split(0.0, 0.0, 0.0, 0.5, 0.4, engine)
    assert parts.prefill == pytest.approx(0.4)
    assert parts.transfer == 0.0 and parts.decode == 0.0


def test_engine_figures_never_exceed_the_decodes_wait():
    engine = EngineTransfer(kv_wait=9.0, xfer_time=9.0, ready_to_first_token=0.0)
    parts = split(0.0, 0.0, 0.0, 0.1, 0.2, engine)
    assert parts.transfer == pytest.approx(0.1)
    assert parts.decode == pytest.approx(0.0)


def test_without_engine_figures_the_transfer_is_unknown_until_estimated():
    parts = split(0.0, 0.0, 0.0, 0.1, 0.4)
    assert parts.transfer is None and parts.transfer_source is None
    assert parts.decode == pytest.approx(0.3)
    estimated = with_estimate(parts, 0.2)
    assert estimated.transfer == pytest.approx(0.2)
    assert estimated.decode == pytest.approx(0.1)
    assert estimated.transfer_source == "estimate"
    assert estimated.total == pytest.approx(parts.total)
    assert with_estimate(parts, 5.0).transfer == pytest.approx(0.3)  # capped by the wait


def test_an_estimate_never_replaces_a_measured_transfer():
    measured = split(0.0, 0.0, 0.0, 0.1, 0.4, EngineTransfer(0.2, 0.2, 0.0))
    assert with_estimate(measured, 0.01) is measured
    colocated = split(0.0, 0.0, 0.0, None, 0.4)
    assert with_estimate(colocated, 0.2) is colocated


def test_engine_stats_read_from_a_response_field():
    stats = {"kv_wait_s": 0.1, "xfer_time_s": 0.09, "ready_to_first_token_s": 0.01}
    assert EngineTransfer.from_json(stats) == EngineTransfer(0.1, 0.09, 0.01)
    assert EngineTransfer.from_json(None) is None
    assert EngineTransfer.from_json({"kv_wait_s": "x"}) is None
    assert EngineTransfer.from_json([1, 2]) is None


def test_json_round_trip_in_milliseconds():
    parts = TtftParts(0.001, 0.0, 0.1, 0.05, 0.02, "engine")
    doc = parts.to_json()
    assert doc["prefill_ms"] == pytest.approx(100.0)
    assert doc["transfer_source"] == "engine"
    back = from_json(doc)
    assert back is not None and back.total == pytest.approx(parts.total)
    assert from_json({"queue_ms": 1}) is None
