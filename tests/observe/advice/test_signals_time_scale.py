"""A stand-in slowed down K times (--time-scale K) is advised in its modelled time: its rates x
K (the rules' thresholds are real req/s and GB/s), its latencies as measured (its SLOs are
set in the same wall time)."""

from __future__ import annotations

import pytest

from observe.advice.signals import advice, from_frame
from tests.observe.advice.test_signals import ENGINES, KV_PER_TOKEN, frame, verdict

SLOW = 8.0


def test_rates_are_read_in_modelled_time():
    wall = frame(request_rate=0.5, kv={**frame()["kv"], "bytes_per_s": 0.5 * 2000 * KV_PER_TOKEN})
    d = from_frame(wall, topology="disaggregated", kv_bytes_per_token=KV_PER_TOKEN, time_scale=SLOW)
    plain = from_frame(wall, topology="disaggregated", kv_bytes_per_token=KV_PER_TOKEN)
    assert d.values["request_rate"] == 4.0 and plain.values["request_rate"] == 0.5
    assert "x 8 (the stand-in's time scale)" in d.sources["request_rate"]
    assert d.values["kv_transfer_gbps"] == pytest.approx(
        SLOW * plain.values["kv_transfer_gbps"], rel=1e-4
    )
    assert d.values["itl_p99_ms"] == plain.values["itl_p99_ms"]  # latencies as measured
    assert d.values["prompt_tokens_mean"] == plain.values["prompt_tokens_mean"]


def test_a_slowed_busy_deployment_is_not_light_traffic():
    wall = frame(request_rate=0.5, engines=ENGINES)  # 3,000-token prompts
    slowed = advice(from_frame(wall, topology="colocated", time_scale=SLOW))
    assert verdict(slowed, "light_traffic")["triggered"] is False
    assert verdict(advice(from_frame(wall, topology="colocated")), "light_traffic")["triggered"]
