"""A model profile derived from a Hugging Face `config.json`, for models pdctl ships no profile of.

Pure: a config dict in, a ModelProfile out, or ModelConfigError naming the field the timing
needs and the config lacks. Parameter counts are recomputed from the shapes (embeddings, head,
attention, MLP or experts, norms), the way PROFILES.md recomputed the shipped ones.
Approximations, said once here: a quantized checkpoint's dtype applies to every weight (gpt-oss
keeps attention in BF16 and only its experts in MXFP4; the experts are ~97% of its weights);
multi-token-prediction layers are left out (vLLM loads them only for speculative decoding).
"""

from __future__ import annotations

from typing import Any

from domain.profiles import ModelConfigError, ModelProfile

# vLLM's dtype "auto": the checkpoint's dtype, except FP32 checkpoints run in FP16.
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp16"}


def derive(config: dict[str, Any], name: str) -> ModelProfile:
    """The profile `config` describes; `name` is what the profile is known by (its path)."""
    c = {**config, **config.get("text_config", {})}  # multimodal configs nest the LM's
    layers, hidden = _int(c, "num_hidden_layers"), _int(c, "hidden_size")
    heads, vocab = _int(c, "num_attention_heads"), _int(c, "vocab_size")
    # HF's own default: no num_key_value_heads means multi-head attention.
    kv_heads = _int(c, "num_key_value_heads") if "num_key_value_heads" in c else heads
    kv_lora, rope = _int(c, "kv_lora_rank", 0), _int(c, "qk_rope_head_dim", 0)
    if kv_lora:
        head_dim = _int(c, "qk_nope_head_dim") + rope
    else:
        head_dim = _int(c, "head_dim") if c.get("head_dim") else hidden // heads
    experts, per_token = _experts(c)
    moe_inter = _int(c, "moe_intermediate_size") if "moe_intermediate_size" in c else 0
    intermediate = _int(c, "intermediate_size") if (not experts or not moe_inter) else 0
    if experts and not moe_inter:
        moe_inter = intermediate  # Mixtral, gpt-oss: experts are intermediate_size wide
    dense_layers = _dense_layers(c, layers) if experts else layers
    moe_layers = layers - dense_layers
    if experts and dense_layers:
        intermediate = _int(c, "intermediate_size")
    weight_dtype, kv_dtype = _dtypes(c)
    attention = _attention_params(c, hidden, heads, kv_heads, head_dim, kv_lora, rope)
    expert = 3 * hidden * moe_inter
    shared = _shared_expert_params(c, hidden, moe_inter)
    moe_layer = hidden * experts + experts * expert + shared
    per_layer_norms = 2 * hidden
    untied = not c.get("tie_word_embeddings", False)
    total = (
        vocab * hidden * (2 if untied else 1)
        + hidden
        + layers * (attention + per_layer_norms)
        + dense_layers * 3 * hidden * intermediate
        + moe_layers * moe_layer
    )
    active = total - moe_layers * (experts - per_token) * expert
    window, sliding = _sliding(c, layers)
    return ModelProfile(
        name=name,
        hf_id=str(c.get("_name_or_path") or name),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        intermediate=intermediate,
        moe_intermediate=moe_inter,
        experts_total=experts,
        experts_active=per_token,
        params_total=float(total),
        params_active=float(active),
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        max_model_len=_int(c, "max_position_embeddings"),
        moe_layers=moe_layers if experts else 0,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope,
        sliding_window=window,
        sliding_layers=sliding,
    )


def _int(c: dict[str, Any], field: str, default: int | None = None) -> int:
    value = c.get(field, default)
    if value is None:
        raise ModelConfigError(f"config lacks {field!r}, which the timing model needs")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelConfigError(f"config field {field!r} must be a whole number, got {value!r}")
    return value


def _experts(c: dict[str, Any]) -> tuple[int, int]:
    """(routed experts, experts per token); (0, 0) for a dense model."""
    names = ("num_experts", "num_local_experts", "n_routed_experts")
    total = next((_int(c, n) for n in names if c.get(n)), 0)
    if not total:
        return 0, 0
    for field in ("num_experts_per_tok", "experts_per_token", "num_experts_per_token"):
        if c.get(field):
            return total, _int(c, field)
    raise ModelConfigError("config lacks 'num_experts_per_tok', which the timing model needs")


def _dense_layers(c: dict[str, Any], layers: int) -> int:
    """Layers of a MoE model with a dense MLP instead (DeepSeek's first k, Qwen's listed ones)."""
    if "first_k_dense_replace" in c:
        return min(layers, _int(c, "first_k_dense_replace"))
    only = c.get("mlp_only_layers") or []
    step = c.get("decoder_sparse_step") or 1
    return sum(1 for i in range(layers) if i in only or (i + 1) % step != 0)


def _shared_expert_params(c: dict[str, Any], hidden: int, moe_inter: int) -> int:
    if c.get("n_shared_experts"):  # DeepSeek: shared experts as wide as the routed ones
        return _int(c, "n_shared_experts") * 3 * hidden * moe_inter
    if c.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one shared expert and its gate
        return 3 * hidden * _int(c, "shared_expert_intermediate_size") + hidden
    return 0


def _attention_params(
    c: dict[str, Any],
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    kv_lora: int,
    rope: int,
) -> int:
    if kv_lora:  # MLA: low-rank query and a compressed KV latent plus the rope key
        q_lora = _int(c, "q_lora_rank", 0)
        q = (
            hidden * q_lora + q_lora + q_lora * heads * head_dim
            if q_lora
            else hidden * heads * head_dim
        )
        v_dim = _int(c, "v_head_dim")
        nope = head_dim - rope
        kv = hidden * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + v_dim)
        return q + kv + heads * v_dim * hidden
    q_and_o = 2 * hidden * heads * head_dim
    kv = 2 * hidden * kv_heads * head_dim
    biased = c.get("attention_bias") or c.get("model_type") == "qwen2"  # Qwen2: QKV bias
    return q_and_o + kv + ((heads + 2 * kv_heads) * head_dim if biased else 0)


def _dtypes(c: dict[str, Any]) -> tuple[str, str]:
    """(weight dtype, KV dtype): the quantization config's, else the checkpoint's."""
    raw = c.get("torch_dtype") or c.get("dtype")
    if raw is None:
        raise ModelConfigError("config lacks 'torch_dtype', which the timing model needs")
    if raw not in TORCH_DTYPES:
        raise ModelConfigError(f"config field 'torch_dtype' {raw!r} is not modelled")
    base = TORCH_DTYPES[raw]
    quant = c.get("quantization_config")
    if not quant:
        return base, base
    method = str(quant.get("quant_method", "")).lower()
    algo = str(quant.get("quant_algo", "")).upper()
    kv = "fp8" if str(quant.get("kv_cache_quant_algo", "")).upper() == "FP8" else base
    if method == "fp8" or (method == "modelopt" and algo == "FP8"):
        return "fp8", kv
    if method == "mxfp4":
        return "mxfp4", kv
    if method == "modelopt" and algo == "NVFP4":
        return "nvfp4", kv
    raise ModelConfigError(
        f"config field 'quantization_config.quant_method' {method!r} is not modelled "
        "(fp8, mxfp4 and modelopt FP8/NVFP4 are)"
    )


def _sliding(c: dict[str, Any], layers: int) -> tuple[int, int]:
    """(window, layers using it): from layer_types when given, else every layer when the
    config turns a window on (Qwen2 carries a window with use_sliding_window false)."""
    window = c.get("sliding_window") or 0
    if not window or c.get("use_sliding_window") is False:
        return 0, 0
    types = c.get("layer_types")
    if types:
        return _int(c, "sliding_window"), sum(1 for t in types if t == "sliding_attention")
    return _int(c, "sliding_window"), layers
