"""Hardware and model profiles for the stand-in engine, loaded from the TOML files beside this.

Each TOML file names the source of every figure; this module only turns them into typed,
validated records and derives what the timing model needs (KV bytes per token, weight bytes).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import MISSING, dataclass, fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PROFILE_DIR = Path(__file__).parent
# Bytes per element. MXFP4: 4 bits plus an 8-bit scale per 32 elements (OCP MX); NVFP4: 4 bits
# plus an FP8 scale per 16. Both run their matmuls at the BF16 rate here (peak_flops).
DTYPE_BYTES: dict[str, float] = {
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "fp32": 4,
    "mxfp4": 4.25 / 8,
    "nvfp4": 4.5 / 8,
}
# Share of link bandwidth a ring all-reduce achieves (see HardwareProfile.allreduce_bandwidth).
COLLECTIVE_EFF = 0.72
Profile = TypeVar("Profile", bound="DataclassInstance")


class UnknownProfile(LookupError):
    """A hardware or model profile name that has no file; the message lists the known ones."""


class ModelConfigError(UnknownProfile):
    """A model config.json that cannot become a profile: the message names the field."""


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    name: str
    vendor: str
    display_name: str
    bf16_tflops: float
    fp8_tflops: float
    hbm_gb: float
    hbm_tbps: float
    gpu_link_gbps: float
    gpu_peer_gbps: float
    p2p: bool
    nic_gbit: float
    pcie_gbps: float
    compute_eff_bf16: float
    compute_eff_fp8: float
    mem_eff: float
    rdma: bool = False  # GPUDirect RDMA NICs (the KV hand-off's path between nodes)
    # A node as sold (DGX/HGX, OAM platforms): GPUs in it, and NICs for traffic between nodes
    # (nic_gbit each). The planner places engines on nodes of gpus_per_node.
    gpus_per_node: int = 8
    nics_per_node: int = 8

    def peak_flops(self, dtype: str) -> float:
        return (self.fp8_tflops if dtype == "fp8" else self.bf16_tflops) * 1e12

    def compute_eff(self, dtype: str) -> float:
        return self.compute_eff_fp8 if dtype == "fp8" else self.compute_eff_bf16

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gb * 1e9

    @property
    def mem_bandwidth(self) -> float:
        """Achievable HBM bytes per second."""
        return self.hbm_tbps * 1e12 * self.mem_eff

    def allreduce_bandwidth(self, tp: int) -> float:
        """Bus bandwidth (bytes/s) of a TP all-reduce over `tp` GPUs of this node.

        A mesh (xGMI) gives each GPU one link per peer, so more peers mean more links; a
        switch (NVLink) gives the full per-GPU rate; without P2P the traffic crosses the host.
        Collectives reach ~0.7-0.75 of the links: RCCL measured 47.7 GB/s on 2 MI300X (one
        64 GB/s link) and 312.9 GB/s on 8 (448 GB/s), per PROFILES.md section 3c.
        """
        if not self.p2p:
            return self.pcie_gbps * 1e9 / 2 * COLLECTIVE_EFF  # up to host, then down again
        links = min(self.gpu_link_gbps, (tp - 1) * self.gpu_peer_gbps)
        return links * 1e9 * COLLECTIVE_EFF

    @property
    def nic_bytes_per_s(self) -> float:
        return self.nic_gbit * 1e9 / 8


@dataclass(frozen=True, slots=True)
class ModelProfile:
    name: str
    hf_id: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    moe_intermediate: int
    experts_total: int
    experts_active: int
    params_total: float
    params_active: float
    weight_dtype: str
    kv_dtype: str
    max_model_len: int
    # A vision encoder (multimodal models only; 0 for text-only ones). An image becomes
    # vision_tokens_per_image prompt tokens (at the profile's stated reference size), each
    # costing vision_flops_per_token in the encoder (simulator/model/encoder.py).
    vision_params: float = 0.0
    vision_tokens_per_image: int = 0
    vision_flops_per_token: float = 0.0
    # Layers with routed experts (0: every layer, when the model is MoE at all).
    moe_layers: int = 0
    # MLA (DeepSeek): the cache holds one latent of kv_lora_rank plus the rope key per layer.
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    # Sliding-window attention: the window and how many layers use it (0: none).
    sliding_window: int = 0
    sliding_layers: int = 0

    @property
    def is_multimodal(self) -> bool:
        return self.vision_tokens_per_image > 0

    @property
    def is_moe(self) -> bool:
        return self.experts_total > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer and KV head, whole model, before TP sharding (MLA: the
        latent and the rope key per layer). Sliding-window layers count in full: what a
        context within the window holds."""
        per_element = int(DTYPE_BYTES[self.kv_dtype])
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.layers * per_element
        return 2 * self.layers * self.kv_heads * self.head_dim * per_element

    def kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        # KV heads shard across TP ranks until each rank holds one; past that they replicate.
        # MLA's latent is not per head: every rank holds all of it.
        if self.is_mla:
            return self.kv_bytes_per_token
        return self.kv_bytes_per_token / min(tp, self.kv_heads)

    @property
    def weight_bytes_per_param(self) -> float:
        return DTYPE_BYTES[self.weight_dtype]

    @property
    def expert_layers(self) -> int:
        return self.moe_layers or self.layers

    @property
    def expert_params(self) -> float:
        """Parameters of one expert in one layer (gate, up and down projections)."""
        return 3 * self.hidden * self.moe_intermediate

    @property
    def all_expert_params(self) -> float:
        return self.expert_layers * self.experts_total * self.expert_params if self.is_moe else 0.0

    @property
    def dense_params(self) -> float:
        """Parameters every token uses: attention, norms, router, dense MLPs, embeddings, head."""
        return self.params_total - self.all_expert_params

    @property
    def weight_bytes(self) -> float:
        return self.params_total * self.weight_bytes_per_param


def _load(kind: str, name: str, record: type[Profile]) -> Profile:
    path = PROFILE_DIR / kind / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(available(kind))
        raise UnknownProfile(f"unknown {kind} profile {name!r}; known: {known}")
    data = tomllib.loads(path.read_text())
    wanted = {f.name for f in fields(record)}
    required = {f.name for f in fields(record) if f.default is MISSING}
    missing = required - data.keys()
    if missing:
        raise ValueError(f"{path}: missing fields {sorted(missing)}")
    return record(**{k: data[k] for k in wanted if k in data})


def for_model(model_name: str) -> str | None:
    """The model profile for a profile name or Hugging Face id; None when none matches."""
    for name in available("models"):
        if model_name in (name, model(name).hf_id):
            return name
    return None


def default_hardware(model_profile: str) -> str:
    """What the stand-in plays when no --hardware is given: the tiny model runs as on a CPU
    (as the real vLLM CPU build here does), every other model on an H100."""
    return "cpu" if model_profile == "tiny" else "h100"


def available(kind: str) -> list[str]:
    return sorted(p.stem for p in (PROFILE_DIR / kind).glob("*.toml"))


@cache
def hardware(name: str) -> HardwareProfile:
    return _load("hardware", name, HardwareProfile)


def is_config_path(name: str) -> bool:
    """Whether a model argument names a config (a folder or a .json file), not a profile."""
    return "/" in name or name.endswith(".json") or Path(name).is_dir()


@cache
def model(name: str) -> ModelProfile:
    """A shipped profile by name, or one derived from a model folder or its config.json."""
    if not is_config_path(name) or (PROFILE_DIR / "models" / f"{name}.toml").is_file():
        return _load("models", name, ModelProfile)
    from domain.profiles.from_config import derive

    try:
        return derive(read_config(Path(name)), name)
    except ModelConfigError as exc:
        raise ModelConfigError(f"{name}: {exc}") from None


def read_config(path: Path) -> dict:
    file = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(file.read_text())
    except FileNotFoundError:
        raise ModelConfigError("no such model folder or config.json") from None
    except (OSError, ValueError) as exc:
        raise ModelConfigError(f"not a readable JSON config ({exc})") from None
    if not isinstance(config, dict):
        raise ModelConfigError("a config.json is a JSON object")
    return config
