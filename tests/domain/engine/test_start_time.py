"""The modelled start of a vLLM instance: its parts move with the model and the hardware."""

from dataclasses import replace

import pytest

from domain import profiles
from domain.engine.start_time import start_parts

TINY, CPU = profiles.model("tiny"), profiles.hardware("cpu")
QWEN, MI300X = profiles.model("qwen3-235b-a22b-fp8"), profiles.hardware("mi300x")


def test_the_tiny_model_on_cpu_starts_in_the_time_the_cpu_build_takes_here():
    assert 46 <= start_parts(TINY, CPU).total_s <= 82


def test_the_235b_fp8_model_on_mi300x_takes_minutes_and_longer_cold():
    warm = start_parts(QWEN, MI300X, tp=4, cache="warm", co_starting=2)
    cold = start_parts(QWEN, MI300X, tp=4, cache="cold", co_starting=2)
    assert 90 < warm.total_s < cold.total_s
    assert cold.total_s > 240 and cold.weights_s > 60  # 2 x 236 GB over one node's disk


def test_weight_loading_rises_with_weight_bytes_and_falls_with_tp():
    light = start_parts(QWEN, MI300X, tp=4, cache="cold")
    heavy = start_parts(replace(QWEN, params_total=QWEN.params_total * 2), MI300X, 4, "cold")
    assert heavy.weights_s == pytest.approx(2 * light.weights_s)
    assert start_parts(QWEN, MI300X, tp=8).weights_s < start_parts(QWEN, MI300X, tp=4).weights_s


def test_instances_starting_together_share_the_disk_when_cold_only():
    one = start_parts(QWEN, MI300X, 4, "cold", co_starting=1)
    two = start_parts(QWEN, MI300X, 4, "cold", co_starting=2)
    assert two.weights_s > one.weights_s
    warm = [start_parts(QWEN, MI300X, 4, "warm", co_starting=n).weights_s for n in (1, 2)]
    assert warm[0] == warm[1]


def test_compile_and_graph_capture_grow_with_layers_and_a_warm_cache_helps():
    small = start_parts(profiles.model("llama-3.1-8b"), MI300X)
    big = start_parts(QWEN, MI300X)
    assert big.compile_s > small.compile_s and big.capture_s > small.capture_s
    cold = start_parts(QWEN, MI300X, cache="cold")
    assert cold.compile_s > big.compile_s and cold.capture_s > big.capture_s


def test_the_kv_pool_is_allocated_at_memory_bandwidth():
    none = start_parts(QWEN, MI300X, kv_pool_bytes=0)
    full = start_parts(QWEN, MI300X, kv_pool_bytes=100e9)
    assert full.profile_s - none.profile_s == pytest.approx(100e9 / MI300X.mem_bandwidth)


def test_unknown_cache_or_bad_counts_are_refused():
    with pytest.raises(ValueError, match="cache must be one of warm, cold"):
        start_parts(TINY, CPU, cache="hot")
    with pytest.raises(ValueError, match="tp and co_starting"):
        start_parts(TINY, CPU, tp=0)


def test_parts_say_what_they_are():
    parts = start_parts(QWEN, MI300X, 4)
    shown = parts.as_dict()
    assert shown["total_s"] == pytest.approx(parts.total_s, abs=0.01)
    assert shown["cache"] == "warm" and "weights" in parts.describe()
