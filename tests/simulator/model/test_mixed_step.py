"""The shape of saturation: what a mixed prefill+decode step pays per running decode and per
context token, so colocated ITL spikes grow with load rather than in whole-chunk quanta."""

import itertools
from dataclasses import replace

import pytest

from domain import profiles
from simulator.model.timing import StepBatch, TimingModel, chunk_attention_pairs
from tests.simulator.factories import timing

BUDGET = 2048  # vLLM's token budget on an L40S: running decodes come out of it first


def l40s_8b(**factors: float) -> TimingModel:
    t = timing("llama-3.1-8b", "l40s", 1)
    return TimingModel(t.model, t.hardware, 1, replace(t.factors, **factors)) if factors else t


def spike(t: TimingModel, decodes: int, ctx: int) -> float:
    """A step that carries `decodes` running decodes of `ctx` tokens each and a fresh
    prompt's chunk in the rest of the budget: the gap those decodes see."""
    chunk = BUDGET - decodes
    return t.step_seconds(
        StepBatch(
            decode_seqs=decodes,
            decode_ctx_tokens=decodes * ctx,
            prefill_seqs=1,
            prefill_tokens=chunk,
            prefill_attn_pairs=chunk_attention_pairs(0, chunk),
        )
    )


def prefill_alone(tokens: int, cached: int = 0) -> StepBatch:
    return StepBatch(
        prefill_seqs=1,
        prefill_tokens=tokens,
        prefill_ctx_tokens=cached,
        prefill_attn_pairs=chunk_attention_pairs(cached, tokens),
    )


def test_a_spike_grows_with_every_running_decode():
    t = l40s_8b()
    spikes = [spike(t, d, 1000) for d in range(0, 65)]
    assert all(b > a for a, b in itertools.pairwise(spikes))


def test_a_spike_grows_with_the_running_decodes_context():
    t = l40s_8b()
    spikes = [spike(t, 16, ctx) for ctx in range(250, 8001, 250)]
    assert all(b > a for a, b in itertools.pairwise(spikes))


def test_each_decode_adds_its_kv_read_and_its_sampling_not_a_chunk_quantum():
    t, ctx = l40s_8b(), 1000
    model, hw = profiles.model("llama-3.1-8b"), profiles.hardware("l40s")
    kv_read = (ctx + 1) * model.kv_bytes_per_token / hw.mem_bandwidth  # TP1: the whole KV
    sampling = model.vocab * t.factors.sampler_bytes_per_logit / hw.mem_bandwidth
    steps = [spike(t, d + 1, ctx) - spike(t, d, ctx) for d in range(0, 64, 8)]
    # The chunk shrinks by the decode's token, a chunk token's linear flops come back as the
    # decode's: what is left is the decode's own attention and sampling, the same each time.
    for step in steps:
        assert step == pytest.approx(kv_read + sampling, rel=0.05)
    # 1001 x 128 KiB at the profile's 864 GB/s x 0.8 (aiconfigurator's achievable share)
    assert kv_read == pytest.approx(0.190e-3, rel=0.01)


def test_decodes_kv_reads_are_not_hidden_under_the_chunks_compute():
    t = l40s_8b()
    chunk = t.step(prefill_alone(BUDGET - 32))
    mixed = t.step(replace(prefill_alone(BUDGET - 32), decode_seqs=32, decode_ctx_tokens=32 * 2000))
    decodes = t.step(StepBatch(decode_seqs=32, decode_ctx_tokens=32 * 2000))
    assert mixed.attention_s == pytest.approx(chunk.attention_s + decodes.attention_s)


def test_a_pure_prefill_step_is_the_single_roofline_and_pays_no_decode_cost():
    model, hw = profiles.model("llama-3.1-8b"), profiles.hardware("l40s")
    t = l40s_8b()
    batch = prefill_alone(2048, cached=4096)
    flops = 4 * model.layers * model.heads * model.head_dim * batch.prefill_attn_pairs
    kv_bytes = (4096 + 2048) * model.kv_bytes_per_token
    expected = max(flops / (hw.peak_flops("bf16") * 0.5), kv_bytes / hw.mem_bandwidth)
    assert t.step(batch).attention_s == pytest.approx(expected)
    # the per-decode sampling is charged to decodes only
    assert l40s_8b(sampler_bytes_per_logit=1e6).step(batch) == t.step(batch)


def test_a_pure_decode_step_keeps_its_roofline():
    model, hw = profiles.model("llama-3.1-8b"), profiles.hardware("l40s")
    step = l40s_8b().step(StepBatch(decode_seqs=64, decode_ctx_tokens=64 * 1500))
    kv_bytes = (64 * 1500 + 64) * model.kv_bytes_per_token
    assert step.attention_s == pytest.approx(kv_bytes / hw.mem_bandwidth)  # memory-bound
