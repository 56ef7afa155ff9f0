"""Profiles derived from a model's config.json: held to the shipped ones, and refusals by name."""

import json
from pathlib import Path

import pytest

from domain import profiles
from domain.profiles.from_config import derive
from simulator.model.timing import StepBatch, TimingModel, calibrated_factors

CONFIGS = Path(__file__).parents[1] / "fixtures" / "model_configs"
SHIPPED = ["llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b-instruct", "qwen3-235b-a22b-fp8", "tiny"]
BATCHES = [
    StepBatch(decode_seqs=1, decode_ctx_tokens=1000),
    StepBatch(decode_seqs=64, decode_ctx_tokens=64 * 3000),
    StepBatch(prefill_seqs=1, prefill_tokens=2048, prefill_attn_pairs=2048 * 2049 // 2),
    StepBatch(decode_seqs=32, decode_ctx_tokens=32 * 2000, prefill_seqs=1, prefill_tokens=512),
]


def _derived(name: str) -> profiles.ModelProfile:
    return profiles.model(str(CONFIGS / name))


@pytest.mark.parametrize("name", SHIPPED)
def test_derived_profile_has_the_shipped_kv_bytes_exactly(name):
    assert _derived(name).kv_bytes_per_token == profiles.model(name).kv_bytes_per_token


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize(("hardware", "tp"), [("h100", 1), ("h100", 8), ("mi300x", 8)])
def test_derived_profile_steps_within_five_percent_of_the_shipped(name, hardware, tp):
    shipped, derived, hw = profiles.model(name), _derived(name), profiles.hardware(hardware)
    factors = calibrated_factors(hardware, name, tp)  # the same factors: the profiles compared
    a, b = TimingModel(shipped, hw, tp, factors), TimingModel(derived, hw, tp, factors)
    for batch in BATCHES:
        assert b.step_seconds(batch) == pytest.approx(a.step_seconds(batch), rel=0.05)


def test_a_folder_and_its_config_json_derive_the_same_profile():
    folder, file = (
        _derived("llama-3.1-8b"),
        profiles.model(str(CONFIGS / "llama-3.1-8b/config.json")),
    )
    assert folder.kv_bytes_per_token == file.kv_bytes_per_token
    assert folder.params_total == file.params_total


def test_deepseek_v3_mla_caches_the_latent_and_rope_key():
    ds = _derived("deepseek-v3")
    assert ds.is_mla and ds.kv_bytes_per_token == (512 + 64) * 61 * 2 == 70_272
    assert ds.kv_bytes_per_token_per_gpu(8) == 70_272  # the latent is not split by TP
    assert ds.weight_dtype == "fp8" and ds.kv_dtype == "bf16"
    assert (ds.experts_total, ds.experts_active, ds.moe_layers) == (256, 8, 58)
    assert ds.params_total == pytest.approx(671e9, rel=0.01)  # published 671B
    assert ds.params_active == pytest.approx(37e9, rel=0.03)  # published 37B
    assert TimingModel(ds, profiles.hardware("h200"), 8).decode_step_seconds(8, 8000) > 0


def test_gpt_oss_sliding_window_moe_and_mxfp4_derive():
    oss = _derived("gpt-oss-120b")
    assert (oss.sliding_window, oss.sliding_layers) == (128, 18)
    assert (oss.experts_total, oss.experts_active, oss.moe_intermediate) == (128, 4, 2880)
    assert oss.weight_dtype == "mxfp4" and oss.weight_bytes_per_param == 4.25 / 8
    assert oss.kv_bytes_per_token == 2 * 36 * 8 * 64 * 2
    assert oss.params_total == pytest.approx(116.8e9, rel=0.01)  # openai's model card
    assert TimingModel(oss, profiles.hardware("h100")).decode_step_seconds(8, 8000) > 0


def test_nvfp4_and_fp8_kv_from_a_modelopt_config():
    config = json.loads((CONFIGS / "llama-3.1-8b/config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": "FP8",
    }
    nv = derive(config, "nvfp4")
    assert (nv.weight_dtype, nv.kv_dtype) == ("nvfp4", "fp8")
    assert nv.kv_bytes_per_token == 131_072 // 2


@pytest.mark.parametrize(
    "field",
    [
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "vocab_size",
        "torch_dtype",
        "max_position_embeddings",
    ],
)
def test_a_config_missing_a_field_is_refused_by_name(tmp_path, field):
    config = json.loads((CONFIGS / "llama-3.1-8b/config.json").read_text())
    del config[field]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(profiles.ModelConfigError, match=f"lacks '{field}'"):
        profiles.model(str(tmp_path))


def test_moe_config_without_experts_per_token_is_refused_by_name():
    config = json.loads((CONFIGS / "qwen3-235b-a22b-fp8/config.json").read_text())
    del config["num_experts_per_tok"]
    with pytest.raises(profiles.ModelConfigError, match="num_experts_per_tok"):
        derive(config, "x")


def test_an_unmodelled_quantization_is_refused_by_name():
    config = json.loads((CONFIGS / "llama-3.1-8b/config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    with pytest.raises(profiles.ModelConfigError, match="quant_method' 'gptq'"):
        derive(config, "x")


def test_a_missing_folder_is_refused(tmp_path):
    with pytest.raises(profiles.ModelConfigError, match="no such model folder"):
        profiles.model(str(tmp_path / "nowhere"))
