"""The stand-in engine's clock: how long one engine step takes on given hardware.

A roofline per part of the step (linear layers, MoE experts, attention), each taking the
larger of its compute time and its memory time, plus the tensor-parallel all-reduces over
the GPU link and a fixed overhead per step and per layer. Pure functions of the batch.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, fields, replace
from functools import cache

from domain.profiles import PROFILE_DIR, HardwareProfile, ModelProfile


@dataclass(frozen=True, slots=True)
class TimingFactors:
    """The named efficiency factors. Defaults hold for dense models on any GPU; a fitted
    override per (hardware, model) lives in profiles/calibration.toml with its sources."""

    # vLLM's CPU-side work per step (scheduling, sampling, input prep): ~1-3 ms with CUDA graphs.
    step_overhead_s: float = 0.002
    # Kernel launches and syncs per decoder layer that no roofline sees.
    layer_overhead_s: float = 0.00002
    # GEMM tile rows: a GEMM with fewer rows (tokens) still pays for a whole tile, so
    # small-batch GEMMs waste the matrix cores (Azure: 1024^3 FP8 runs at 14% of peak on H100).
    gemm_tile_rows: float = 64.0
    # Fused-MoE kernels pick small row blocks for small batches (vLLM's fused_moe configs
    # use BLOCK_SIZE_M 16 there), so an expert pays for at least this many rows.
    moe_tile_rows: float = 16.0
    # Fused-MoE kernels run below dense GEMM efficiency (routing, permutes, many small GEMMs).
    moe_eff: float = 1.0
    # Flash attention reaches about half of GEMM peak.
    attention_eff: float = 0.5
    # Bytes the sampler moves per logit of each decode it samples: vLLM's v1 Sampler
    # (vllm/v1/sample/sampler.py) casts the head's logits to FP32, applies the temperature,
    # takes the softmax and races it against exponential noise, each a read and a write of
    # 4 B per vocabulary entry.
    sampler_bytes_per_logit: float = 32.0
    # Fixed cost of one all-reduce (launch plus link latency per ring).
    allreduce_latency_s: float = 0.00001
    # Bytes per activation element moved in all-reduces.
    activation_bytes: int = 2
    # What the published points these factors were fitted to are (empty: defaults).
    fitted_to: tuple[str, ...] = ()
    # The same points as ids of `pdctl plan --fidelity` rows: those rows are not judged.
    fitted_figures: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StepBatch:
    """What one engine step computes.

    decode_seqs: sequences that add one token each; decode_ctx_tokens: their context lengths
    summed. prefill_tokens: prompt tokens computed in chunks this step, from prefill_seqs
    sequences; prefill_ctx_tokens: tokens already cached before each chunk, summed;
    prefill_attn_pairs: (query, key) pairs the chunks' causal attention covers.
    """

    decode_seqs: int = 0
    decode_ctx_tokens: int = 0
    prefill_seqs: int = 0
    prefill_tokens: int = 0
    prefill_ctx_tokens: int = 0
    prefill_attn_pairs: int = 0

    @property
    def tokens(self) -> int:
        return self.decode_seqs + self.prefill_tokens


def chunk_attention_pairs(start: int, length: int) -> int:
    """Causal (query, key) pairs for a chunk of `length` tokens after `start` cached ones."""
    return length * start + length * (length + 1) // 2


@dataclass(frozen=True, slots=True)
class StepTime:
    """A step's time and its parts, so the dashboard and tests can say what bound it."""

    total_s: float
    linear_s: float
    experts_s: float
    attention_s: float
    allreduce_s: float
    overhead_s: float


class TimingModel:
    """Step times for one model on one hardware profile at one TP degree."""

    def __init__(
        self,
        model: ModelProfile,
        hardware: HardwareProfile,
        tp: int = 1,
        factors: TimingFactors | None = None,
    ) -> None:
        if tp < 1:
            raise ValueError("tp must be >= 1")
        self.model, self.hardware, self.tp = model, hardware, tp
        self.factors = factors or calibrated_factors(hardware.name, model.name, tp)
        m, f = model, self.factors
        self._wbytes = m.weight_bytes_per_param
        self._kv_per_gpu = m.kv_bytes_per_token_per_gpu(tp)
        self._head_params = m.vocab * m.hidden
        # Dense params applied to every token: all but the embedding table and the LM head.
        self._dense_token_params = m.dense_params - 2 * self._head_params
        self._linear_rate = hardware.peak_flops(m.weight_dtype) * hardware.compute_eff(
            m.weight_dtype
        )
        self._attn_rate = hardware.peak_flops("bf16") * f.attention_eff
        self._bw = hardware.mem_bandwidth
        self._expert_layers = m.expert_layers
        self._attn_s_per_pair = 4 * m.layers * m.heads * m.head_dim / tp / self._attn_rate
        # Each running decode reads its context's KV (the model profile's bytes per token, this
        # GPU's share) at the card's memory bandwidth (the hardware profile).
        self._kv_s_per_token = self._kv_per_gpu / self._bw
        self._decode_s_per_pair = max(self._attn_s_per_pair, self._kv_s_per_token)
        self._overhead = f.step_overhead_s + m.layers * f.layer_overhead_s
        # Per running decode: the sampler's passes over its logits (the head's flops are
        # counted with the linear layers). Llama-3.1-8B on an L40S: 128,256 x 32 B at 691 GB/s
        # (864 x 0.8 achievable), 5.9 us a decode.
        self._sampling_per_decode = m.vocab * f.sampler_bytes_per_logit / self._bw

    def step(self, batch: StepBatch) -> StepTime:
        m, f, tp = self.model, self.factors, self.tp
        tokens = batch.tokens
        if tokens == 0:
            return StepTime(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        sampled = batch.decode_seqs + batch.prefill_seqs
        tile = f.gemm_tile_rows
        linear_flops = (
            2 * (self._dense_token_params * (tokens + tile) + self._head_params * (sampled + tile))
        ) / tp
        linear_bytes = (m.dense_params - self._head_params) * self._wbytes / tp
        linear_s = max(linear_flops / self._linear_rate, linear_bytes / self._bw)
        experts_s = 0.0
        if m.is_moe:
            k, e = m.experts_active, m.experts_total
            # Experts that at least one token of the batch routes to (uniform routing).
            touched = e * (1.0 - (1.0 - k / e) ** tokens)
            rows = tokens * k + touched * f.moe_tile_rows
            expert_flops = 2 * self._expert_layers * m.expert_params * rows / tp
            expert_bytes = self._expert_layers * touched * m.expert_params * self._wbytes / tp
            experts_s = max(expert_flops / (self._linear_rate * f.moe_eff), expert_bytes / self._bw)
        # A mixed step's attention is two rooflines added, not one over the whole batch:
        # vLLM's attention backends sort a batch decodes first and split it there
        # (split_decodes_and_prefills, vllm/v1/attention/backends/utils.py); FlashInfer then
        # runs its decode wrapper and its prefill wrapper, ROCm's AITER backend (MI300X) its
        # decode and prefill kernels, one after the other. So the decodes' KV reads are not
        # hidden under the chunk's compute-bound attention, and an ITL spike grows with the
        # running decodes and their context. (FlashAttention's varlen kernel runs both in one
        # launch; the sum is still the better guess there: measured spikes grow with load.)
        # A step of one kind is the single roofline it always was.
        attention_s = 0.0
        if batch.prefill_tokens:
            attention_s = max(
                batch.prefill_attn_pairs * self._attn_s_per_pair,
                (batch.prefill_ctx_tokens + batch.prefill_tokens) * self._kv_s_per_token,
            )
        if batch.decode_seqs:
            # One query per decode: its flops and its KV bytes both go as its context.
            attention_s += (batch.decode_ctx_tokens + batch.decode_seqs) * self._decode_s_per_pair
        allreduce_s = 0.0
        if tp > 1:
            message = tokens * m.hidden * f.activation_bytes
            ring = 2 * (tp - 1) / tp * message / self.hardware.allreduce_bandwidth(tp)
            allreduce_s = 2 * m.layers * (ring + f.allreduce_latency_s)
        overhead_s = self._overhead + batch.decode_seqs * self._sampling_per_decode
        total = linear_s + experts_s + attention_s + allreduce_s + overhead_s
        return StepTime(total, linear_s, experts_s, attention_s, allreduce_s, overhead_s)

    def step_seconds(self, batch: StepBatch) -> float:
        return self.step(batch).total_s

    def decode_step_seconds(self, seqs: int, ctx_tokens: int) -> float:
        return self.step(StepBatch(decode_seqs=seqs, decode_ctx_tokens=ctx_tokens)).total_s

    def prefill_seconds(self, prompt_tokens: int, chunk: int = 8192) -> float:
        """Time to prefill one prompt alone, chunk by chunk."""
        total, done = 0.0, 0
        while done < prompt_tokens:
            n = min(chunk, prompt_tokens - done)
            batch = StepBatch(
                prefill_seqs=1,
                prefill_tokens=n,
                prefill_ctx_tokens=done,
                prefill_attn_pairs=chunk_attention_pairs(done, n),
            )
            total += self.step_seconds(batch)
            done += n
        return total

    def kv_pool_tokens(self, gpu_memory_utilization: float = 0.9) -> int:
        """KV tokens that fit in the memory left after weights and activations, per vLLM."""
        per_gpu = self.hardware.hbm_bytes * gpu_memory_utilization
        weights = self.model.weight_bytes / self.tp
        # Activations, CUDA graphs and the sampler's buffers: a few percent of the card.
        reserve = 0.04 * self.hardware.hbm_bytes
        free = per_gpu - weights - reserve
        return max(0, int(free / self._kv_per_gpu))


def kv_transfer_seconds(
    tokens: int, model: ModelProfile, bandwidth_bytes_s: float, latency_s: float = 0.0002
) -> float:
    """Modelled time to move a prompt's KV cache: whole-model bytes over the link."""
    if tokens <= 0:
        return 0.0
    return latency_s + tokens * model.kv_bytes_per_token / bandwidth_bytes_s


@cache
def _calibration_table() -> dict:
    path = PROFILE_DIR / "calibration.toml"
    return tomllib.loads(path.read_text()) if path.is_file() else {}


FITTED_LISTS = ("fitted_to", "fitted_figures")


def calibrated_factors(hardware_name: str, model_name: str, tp: int | None = None) -> TimingFactors:
    """Defaults, overridden by the fitted entry for this pair when one exists, then by the
    entry's `tpN` table for that TP degree (a factor fitted to that layout alone)."""
    entry = _calibration_table().get(hardware_name, {}).get(model_name)
    if not entry:
        return TimingFactors()
    values = {k: v for k, v in entry.items() if not _is_tp_table(k)}
    if tp is not None:
        for key, value in entry.get(f"tp{tp}", {}).items():
            values[key] = (*values.get(key, ()), *value) if key in FITTED_LISTS else value
    known = {f.name for f in fields(TimingFactors)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"calibration.toml [{hardware_name}.{model_name}]: unknown {unknown}")
    for key in FITTED_LISTS:
        if key in values:
            values[key] = tuple(values[key])
    return replace(TimingFactors(), **values)


def tp_overrides(hardware_name: str, model_name: str) -> list[int]:
    """TP degrees with factors of their own for this pair."""
    entry = _calibration_table().get(hardware_name, {}).get(model_name, {})
    return sorted(int(k[2:]) for k in entry if _is_tp_table(k))


def _is_tp_table(key: str) -> bool:
    return re.fullmatch(r"tp\d+", key) is not None
