import pytest

from domain import profiles
from simulator.model.timing import (
    StepBatch,
    TimingFactors,
    TimingModel,
    calibrated_factors,
    chunk_attention_pairs,
    kv_transfer_seconds,
)
from tests.simulator.factories import timing


def test_decode_step_is_memory_bound_and_grows_slowly_with_batch():
    t = timing()
    one, many = t.decode_step_seconds(1, 2000), t.decode_step_seconds(64, 64 * 2000)
    assert one < many < 3 * one  # weights dominate: 64x the sequences, far less than 64x time


def test_prefill_is_compute_bound_and_linear_in_prompt_length():
    t = timing("llama-3.1-70b", "h100", 4)
    short, long = t.prefill_seconds(2000), t.prefill_seconds(8000)
    assert 3.5 < long / short < 5.0  # linear, plus a little attention


def test_a_prefill_in_the_batch_stalls_the_decodes():
    t = timing()
    decode = t.step_seconds(StepBatch(decode_seqs=40, decode_ctx_tokens=40 * 2500))
    mixed = t.step_seconds(
        StepBatch(
            decode_seqs=40,
            decode_ctx_tokens=40 * 2500,
            prefill_seqs=1,
            prefill_tokens=2000,
            prefill_attn_pairs=chunk_attention_pairs(0, 2000),
        )
    )
    assert mixed > 3 * decode


def test_tensor_parallel_shortens_a_prefill_but_pays_all_reduces():
    model, hw = profiles.model("llama-3.1-70b"), profiles.hardware("h100")
    tp1 = TimingModel(model, hw, 1).step(StepBatch(prefill_seqs=1, prefill_tokens=4096))
    tp4 = TimingModel(model, hw, 4).step(StepBatch(prefill_seqs=1, prefill_tokens=4096))
    assert tp4.total_s < tp1.total_s / 2
    assert tp1.allreduce_s == 0 < tp4.allreduce_s


def test_l40s_all_reduce_goes_through_the_host():
    model = profiles.model("llama-3.1-8b")
    batch = StepBatch(prefill_seqs=1, prefill_tokens=4096)
    l40s = TimingModel(model, profiles.hardware("l40s"), 2).step(batch).allreduce_s
    h100 = TimingModel(model, profiles.hardware("h100"), 2).step(batch).allreduce_s
    assert l40s > 10 * h100


def test_moe_decode_reads_only_touched_experts_at_batch_one():
    t = timing()
    one = t.step(StepBatch(decode_seqs=1, decode_ctx_tokens=100))
    big = t.step(StepBatch(decode_seqs=128, decode_ctx_tokens=128 * 100))
    assert big.experts_s > 2 * one.experts_s


def test_calibrated_pair_carries_its_sources_and_others_use_defaults():
    fitted = calibrated_factors("mi300x", "qwen3-235b-a22b-fp8")
    assert fitted.moe_eff < 1 and fitted.fitted_to
    assert calibrated_factors("h100", "llama-3.1-8b") == TimingFactors()


def test_a_tp_table_overrides_only_its_own_degree_and_adds_its_source():
    base = calibrated_factors("mi300x", "qwen3-235b-a22b-fp8")
    tp4 = calibrated_factors("mi300x", "qwen3-235b-a22b-fp8", 4)
    tp8 = calibrated_factors("mi300x", "qwen3-235b-a22b-fp8", 8)
    assert tp4 == base
    assert tp8.moe_eff < base.moe_eff and tp8.layer_overhead_s == base.layer_overhead_s
    assert tp8.fitted_to[: len(base.fitted_to)] == base.fitted_to
    assert "TP8" in tp8.fitted_to[-1]
    model, hw = profiles.model("qwen3-235b-a22b-fp8"), profiles.hardware("mi300x")
    assert TimingModel(model, hw, 8).factors == tp8


def test_kv_transfer_time_llama70b_10k_tokens_over_400g():
    seconds = kv_transfer_seconds(10_000, profiles.model("llama-3.1-70b"), 400e9 / 8, 0.0)
    assert seconds == pytest.approx(0.0655, rel=0.01)  # the vLLM guide's ~65 ms


def test_kv_pool_is_what_memory_leaves_after_weights():
    assert timing("llama-3.1-70b", "h100", 1).kv_pool_tokens() == 0  # 141 GB on 80 GB
    assert timing("llama-3.1-70b", "h100", 4).kv_pool_tokens() > 100_000


def test_bad_tp_is_refused():
    with pytest.raises(ValueError, match="tp"):
        timing(tp=0)
