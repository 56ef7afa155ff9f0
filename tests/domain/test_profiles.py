import pytest

from domain import profiles

REFERENCE_KV_BYTES = {
    "llama-3.1-70b": 327_680,
    "llama-3.1-8b": 131_072,
    "qwen3-235b-a22b-fp8": 192_512,
    "qwen2.5-7b-instruct": 57_344,
    "tiny": 2 * 2 * 2 * 64 * 2,
}


@pytest.mark.parametrize(("name", "expected"), sorted(REFERENCE_KV_BYTES.items()))
def test_kv_bytes_per_token_of_reference_models(name, expected):
    assert profiles.model(name).kv_bytes_per_token == expected


def test_kv_heads_stop_sharding_past_their_count():
    qwen3 = profiles.model("qwen3-235b-a22b-fp8")
    assert qwen3.kv_bytes_per_token_per_gpu(8) == 192_512 / 4 == 48_128
    assert qwen3.kv_bytes_per_token_per_gpu(2) == 192_512 / 2


def test_every_hardware_profile_loads_with_dense_figures():
    names = profiles.available("hardware")
    assert {"mi300x", "h100", "h200", "b200", "l40s"} <= set(names)
    for name in names:
        hw = profiles.hardware(name)
        assert hw.fp8_tflops >= hw.bf16_tflops > 0
        assert 0 < hw.mem_eff <= 1 and 0 < hw.compute_eff_bf16 <= 1
    # Sparse numbers written into a dense field is the classic mistake (PROFILES.md).
    assert profiles.hardware("h100").bf16_tflops < 1000
    assert profiles.hardware("b200").fp8_tflops == 4500


def test_l40s_has_no_peer_to_peer_and_mesh_allreduce_grows_with_peers():
    assert profiles.hardware("l40s").p2p is False
    mi300x = profiles.hardware("mi300x")
    assert mi300x.allreduce_bandwidth(8) > 4 * mi300x.allreduce_bandwidth(2)
    # RCCL measured 47.7 GB/s busBW on 2 MI300X and 312.9 on 8 (PROFILES.md 3c).
    assert mi300x.allreduce_bandwidth(2) == pytest.approx(47.7e9, rel=0.05)
    assert mi300x.allreduce_bandwidth(8) == pytest.approx(312.9e9, rel=0.05)


def test_moe_model_splits_dense_and_expert_params():
    qwen3 = profiles.model("qwen3-235b-a22b-fp8")
    assert qwen3.is_moe
    assert qwen3.all_expert_params == pytest.approx(227.1e9, rel=0.01)
    assert 7e9 < qwen3.dense_params < 9e9


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(profiles.UnknownProfile, match=r"known: .*llama-3\.1-70b"):
        profiles.model("gpt-5")
