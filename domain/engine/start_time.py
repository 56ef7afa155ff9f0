"""How long a vLLM instance takes from its spawn to its HTTP port opening, in parts.

- imports: Python, torch and vLLM, once per engine process started one after another (the API
  server, the engine core, the workers of a multiprocessing executor);
- init: device, config, tokenizer and API server set-up; model_init: building the modules;
- weights: cold, every starting instance of the node reads its checkpoint from one disk (all of
  it: the ranks read their shards of the same files) and then copies its shard to its device;
  warm, the shard comes from the page cache;
- compile: torch.compile, Dynamo per layer and Inductor once (a warm compile cache is faster);
- capture: CUDA/HIP graphs per layer; profile: the run that sizes the KV pool, and the pool's
  allocation at memory bandwidth.

vLLM binds its HTTP port only once the engine is up, so the sum is when the port opens. Every
constant is in domain/profiles/start_time.toml with its source. Pure: no clock, no I/O.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass
from functools import cache

from domain.profiles import PROFILE_DIR, HardwareProfile, ModelProfile

CACHES = ("warm", "cold")


@dataclass(frozen=True, slots=True)
class StartConstants:
    import_s: float
    init_s: float
    model_init_s: float
    storage_gbps: float
    page_cache_gbps: float
    dynamo_s_per_layer: float
    inductor_cold_s: float
    inductor_warm_s: float
    capture_s_per_layer_warm: float
    capture_s_per_layer_cold: float
    profile_s: float
    processes_tp1: int
    processes_tp: int


@dataclass(frozen=True, slots=True)
class StartParts:
    """One instance's modelled start, part by part (seconds)."""

    imports_s: float
    init_s: float
    weights_s: float
    compile_s: float
    capture_s: float
    profile_s: float
    cache: str

    @property
    def total_s(self) -> float:
        return (
            self.imports_s
            + self.init_s
            + self.weights_s
            + self.compile_s
            + self.capture_s
            + self.profile_s
        )

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {k: round(v, 2) for k, v in asdict(self).items() if k != "cache"}
        return {**out, "total_s": round(self.total_s, 2), "cache": self.cache}

    def describe(self) -> str:
        parts = ", ".join(
            f"{k.removesuffix('_s')} {v:.1f} s"
            for k, v in asdict(self).items()
            if k != "cache" and v >= 0.05
        )
        return f"{self.total_s:.1f} s {self.cache} ({parts})"


@cache
def constants(hardware: str) -> StartConstants:
    """The [gpu] table with the hardware's own table over it ([cpu] for the CPU profile)."""
    data = tomllib.loads((PROFILE_DIR / "start_time.toml").read_text())
    return StartConstants(**{**data["gpu"], **data.get(hardware, {})})


def start_parts(
    model: ModelProfile,
    hardware: HardwareProfile,
    tp: int = 1,
    cache: str = "warm",
    co_starting: int = 1,
    kv_pool_bytes: float = 0.0,
) -> StartParts:
    """One instance of `model` over `tp` GPUs of `hardware`, with `co_starting` instances
    (itself included) of the node loading their weights at the same time."""
    if cache not in CACHES:
        raise ValueError(f"cache must be one of {', '.join(CACHES)}")
    if tp < 1 or co_starting < 1:
        raise ValueError("tp and co_starting must be >= 1")
    c = constants(hardware.name)
    cold = cache == "cold"
    processes = c.processes_tp1 if tp == 1 else c.processes_tp
    shard = model.weight_bytes / tp
    weights = shard / (c.page_cache_gbps * 1e9)
    if cold:  # the node's disk first, shared by every instance starting with this one
        weights += model.weight_bytes * co_starting / (c.storage_gbps * 1e9)
    inductor = c.inductor_cold_s if cold else c.inductor_warm_s
    per_layer = c.capture_s_per_layer_cold if cold else c.capture_s_per_layer_warm
    return StartParts(
        imports_s=processes * c.import_s,
        init_s=c.init_s + c.model_init_s,
        weights_s=weights,
        compile_s=model.layers * c.dynamo_s_per_layer + inductor,
        capture_s=model.layers * per_layer,
        profile_s=c.profile_s + kv_pool_bytes / hardware.mem_bandwidth,
        cache=cache,
    )
