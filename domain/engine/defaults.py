"""The engine settings vLLM picks when a flag is not given, and why: by device and usage.

vLLM 0.32.0 chooses `max_num_batched_tokens` and `max_num_seqs` from the device's total memory,
its name and the usage context (`EngineArgs.get_batch_defaults`, then
`_set_default_max_num_seqs_and_batched_tokens_args`, in `vllm/engine/arg_utils.py`), the block
size from the platform (16 on GPUs, `CacheConfig.DEFAULT_BLOCK_SIZE`; 128 on CPU,
`CpuPlatform.check_and_update_config`), and turns chunked prefill and prefix caching on for
every decoder-only generative model. The stand-in and the planner take their defaults from
here, so a user who gives no flags gets the batch vLLM would run. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.profiles import HardwareProfile

GIB = 1024**3
# vLLM's thresholds on torch's reported device total, in GiB. Each profile's memory (decimal
# GB) lies on the same side of them as the total its device reports (H100 80 GB: 79.6 GiB,
# H200 141 GB: 139.8 GiB, MI300X 192 GB: 191.7 GiB, L40S 48 GB: 44.4 GiB).
LARGEST_TIER_GIB = 160
LARGE_TIER_GIB = 70
GPU_BLOCK_SIZE = 16
CPU_BLOCK_SIZE = 128
USAGE_CONTEXTS = ("api_server", "llm_class")
DECODER_ONLY = "decoder-only generative model"


@dataclass(frozen=True, slots=True)
class EngineDefaults:
    """What the engine runs with once every unset flag took vLLM's default; `reasons` says,
    per defaulted flag, which rule chose it (given flags are kept and not explained)."""

    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    reasons: tuple[tuple[str, str], ...] = ()

    def explain(self) -> str:
        """The defaulted flags grouped by the rule that chose them, on one line:
        `--max-num-batched-tokens 2048, --max-num-seqs 256 (NVIDIA L40S: under 70 GiB)`."""
        values = {
            "--max-num-batched-tokens": self.max_num_batched_tokens,
            "--max-num-seqs": self.max_num_seqs,
            "--block-size": self.block_size,
            "--enable-chunked-prefill": "on" if self.enable_chunked_prefill else "off",
            "--enable-prefix-caching": "on" if self.enable_prefix_caching else "off",
        }
        groups: dict[str, list[str]] = {}
        for flag, why in self.reasons:
            groups.setdefault(why, []).append(f"{flag} {values[flag]}")
        return "; ".join(f"{', '.join(flags)} ({why})" for why, flags in groups.items())


def batch_tier(hardware: HardwareProfile, world_size: int, usage: str) -> tuple[int, int, str]:
    """(max_num_batched_tokens, max_num_seqs, why) before the model-length clamp."""
    offline = usage == "llm_class"
    if hardware.name == "cpu":
        tokens = (4096 if offline else 2048) * world_size
        seqs = (256 if offline else 128) * world_size
        return tokens, seqs, f"CPU defaults x world size {world_size}"
    memory = hardware.hbm_bytes / GIB
    name = hardware.display_name.lower()
    if memory >= LARGEST_TIER_GIB:
        return 16384, 1024, f"{hardware.display_name}: >= {LARGEST_TIER_GIB} GiB of memory"
    if memory >= LARGE_TIER_GIB and "a100" not in name:
        return (
            16384 if offline else 8192,
            1024,
            f"{hardware.display_name}: >= {LARGE_TIER_GIB} GiB of memory, not an A100",
        )
    why = (
        f"{hardware.display_name}: an A100"
        if "a100" in name
        else f"{hardware.display_name}: under {LARGE_TIER_GIB} GiB of memory"
    )
    return (8192 if offline else 2048), 256, why


def engine_defaults(
    hardware: HardwareProfile,
    *,
    max_model_len: int,
    world_size: int = 1,
    usage: str = "api_server",
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    block_size: int | None = None,
    enable_chunked_prefill: bool | None = None,
    enable_prefix_caching: bool | None = None,
) -> EngineDefaults:
    """Resolve every None the way vLLM's `vllm serve` (usage `api_server`) or `LLM(...)`
    (`llm_class`) would on `world_size` (TP x PP) devices of `hardware`."""
    if usage not in USAGE_CONTEXTS:
        raise ValueError(f"usage must be one of {USAGE_CONTEXTS}, got {usage!r}")
    reasons: list[tuple[str, str]] = []
    chunked = True if enable_chunked_prefill is None else enable_chunked_prefill
    if enable_chunked_prefill is None:
        reasons.append(("--enable-chunked-prefill", DECODER_ONLY))
    prefix = True if enable_prefix_caching is None else enable_prefix_caching
    if enable_prefix_caching is None:
        reasons.append(("--enable-prefix-caching", DECODER_ONLY))
    tier_tokens, tier_seqs, why = batch_tier(hardware, world_size, usage)
    seqs = tier_seqs if max_num_seqs is None else max_num_seqs
    if max_num_seqs is None:
        reasons.append(("--max-num-seqs", why))
    if max_num_batched_tokens is None:
        tokens, clamp = tier_tokens, ""
        if not chunked and max_model_len > tokens:
            tokens, clamp = max_model_len, f"; raised to max-model-len {max_model_len}"
        if seqs * max_model_len < tokens:
            tokens = seqs * max_model_len
            clamp = f"; clamped to max-num-seqs x max-model-len {tokens}"
        reasons.append(("--max-num-batched-tokens", why + clamp))
    else:
        tokens = max_num_batched_tokens
    if block_size is None:
        block_size = CPU_BLOCK_SIZE if hardware.name == "cpu" else GPU_BLOCK_SIZE
        reasons.append(("--block-size", "CPU backend" if block_size == CPU_BLOCK_SIZE else "GPUs"))
    return EngineDefaults(tokens, seqs, block_size, chunked, prefix, tuple(reasons))
