"""vLLM's default batch settings by device, as `vllm serve` and `LLM(...)` pick them (0.32.0)."""

import pytest

from domain import profiles
from domain.engine.defaults import engine_defaults

# (hardware, world size) -> API server's (max_num_batched_tokens, max_num_seqs, block_size),
# read from EngineArgs.get_batch_defaults and the platforms' block-size defaults.
API_SERVER = {
    ("h100", 1): (8192, 1024, 16),
    ("h200", 8): (8192, 1024, 16),
    ("mi300x", 1): (16384, 1024, 16),
    ("b200", 4): (16384, 1024, 16),
    ("l40s", 1): (2048, 256, 16),
    ("cpu", 1): (2048, 128, 128),
    ("cpu", 2): (4096, 256, 128),
}


@pytest.mark.parametrize(("hardware", "world_size"), sorted(API_SERVER))
def test_api_server_defaults_follow_the_device(hardware, world_size):
    chosen = engine_defaults(
        profiles.hardware(hardware), max_model_len=131072, world_size=world_size
    )
    assert (chosen.max_num_batched_tokens, chosen.max_num_seqs, chosen.block_size) == (
        API_SERVER[(hardware, world_size)]
    )
    assert chosen.enable_chunked_prefill and chosen.enable_prefix_caching


def test_every_profile_has_an_expected_row():
    assert {h for h, _ in API_SERVER} == set(profiles.available("hardware"))


def test_offline_usage_gets_the_larger_token_budget_on_large_gpus():
    h100 = profiles.hardware("h100")
    offline = engine_defaults(h100, max_model_len=131072, usage="llm_class")
    assert (offline.max_num_batched_tokens, offline.max_num_seqs) == (16384, 1024)
    l40s = engine_defaults(profiles.hardware("l40s"), max_model_len=131072, usage="llm_class")
    assert (l40s.max_num_batched_tokens, l40s.max_num_seqs) == (8192, 256)


def test_an_a100_keeps_the_small_defaults_despite_its_memory():
    a100 = profiles.HardwareProfile(
        **{
            **{
                f: getattr(profiles.hardware("h100"), f) for f in profiles.HardwareProfile.__slots__
            },
            "name": "a100",
            "display_name": "NVIDIA A100-SXM4-80GB",
        }
    )
    chosen = engine_defaults(a100, max_model_len=131072)
    assert (chosen.max_num_batched_tokens, chosen.max_num_seqs) == (2048, 256)
    assert "A100" in chosen.explain()


def test_a_short_model_length_clamps_the_token_budget():
    chosen = engine_defaults(profiles.hardware("h100"), max_model_len=4, max_num_seqs=2)
    assert chosen.max_num_batched_tokens == 8


def test_without_chunked_prefill_the_budget_holds_one_whole_prompt():
    chosen = engine_defaults(
        profiles.hardware("l40s"), max_model_len=32768, enable_chunked_prefill=False
    )
    assert chosen.max_num_batched_tokens == 32768
    assert "raised to max-model-len 32768" in chosen.explain()


def test_given_flags_are_kept_and_not_explained():
    chosen = engine_defaults(
        profiles.hardware("cpu"),
        max_model_len=2048,
        max_num_batched_tokens=512,
        max_num_seqs=8,
        block_size=16,
        enable_prefix_caching=False,
        enable_chunked_prefill=True,
    )
    assert (chosen.max_num_batched_tokens, chosen.max_num_seqs, chosen.block_size) == (512, 8, 16)
    assert not chosen.enable_prefix_caching
    assert chosen.explain() == ""


def test_the_explanation_names_each_defaulted_flag_and_its_rule():
    text = engine_defaults(profiles.hardware("l40s"), max_model_len=131072).explain()
    assert "--max-num-seqs 256, --max-num-batched-tokens 2048 (NVIDIA L40S: under 70 GiB" in text
    assert "--block-size 16 (GPUs)" in text


def test_an_unknown_usage_context_is_refused():
    with pytest.raises(ValueError, match="usage"):
        engine_defaults(profiles.hardware("cpu"), max_model_len=8, usage="batch")
