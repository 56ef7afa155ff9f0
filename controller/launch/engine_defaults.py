"""What an engine of a deployment runs with where the spec leaves a vLLM flag unset, and why.

Shown beside each rendered command: the same selection `pdctl sim` makes, or for a real
engine on hardware pdctl has no profile of, the rule vLLM will apply on the node.
"""

from __future__ import annotations

from dataclasses import replace

from controller.spec.deployment import DeploymentSpec, Engine, InstanceGroup
from domain import profiles
from domain.engine.defaults import engine_defaults

# vLLM's rule in one line, for a GPU pdctl cannot see (EngineArgs.get_batch_defaults).
BY_DEVICE = (
    "vLLM picks --max-num-batched-tokens / --max-num-seqs by the device: 16384 / 1024 at "
    ">= 160 GiB, 8192 / 1024 at >= 70 GiB (not an A100), else 2048 / 256; block size 16"
)
# Flags whose value the defaults would choose, as they may appear in a group's extra_args.
DEFAULTED_FLAGS = (
    "--max-num-batched-tokens",
    "--max-num-seqs",
    "--block-size",
    "--enable-chunked-prefill",
    "--no-enable-chunked-prefill",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
)


def defaults_note(spec: DeploymentSpec, group: InstanceGroup) -> str:
    """One line for the group's engines; empty when every defaulted flag is given."""
    profile = profiles.for_model(spec.model)
    hardware = spec.hardware or (
        profiles.default_hardware(profile) if spec.engine == Engine.SIM and profile else None
    )
    given = {
        arg.split("=", 1)[0]
        for arg in (*spec.extra_args, *group.extra_args)
        if arg.startswith("--")
    }
    if hardware is None:
        if {group.max_num_seqs, group.max_num_batched_tokens} == {None} and not (
            given & set(DEFAULTED_FLAGS[:3])
        ):
            return BY_DEVICE
        return ""
    chosen = engine_defaults(
        profiles.hardware(hardware),
        max_model_len=spec.max_model_len
        or (profiles.model(profile).max_model_len if profile else 1 << 20),
        world_size=group.tp,
        max_num_batched_tokens=group.max_num_batched_tokens,
        max_num_seqs=group.max_num_seqs,
        enable_prefix_caching=spec.prefix_caching,
    )
    kept = tuple(
        (flag, why)
        for flag, why in chosen.reasons
        if flag not in given and f"--no-{flag[2:]}" not in given
    )
    return replace(chosen, reasons=kept).explain()
