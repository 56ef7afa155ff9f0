"""What a spec may put in an engine's environment: an allowlist, never a denylist.

Allowed: the names in ALLOWED_NAMES, and names under the documented prefixes of vLLM and the
libraries it drives (ALLOWED_PREFIXES: vLLM, NCCL/RCCL, UCX, NIXL, MORI, Hugging Face, OpenMP,
CUDA/HIP/ROCr device selection, torch.distributed) unless REFUSED_NAMES or REFUSED_PATTERNS
say otherwise: inside an allowed prefix a name still may not point the process at a plugin,
library, module, file or install directory it would load or run (NCCL_NET_PLUGIN,
VLLM_NCCL_SO_PATH, UCX_MODULE_DIR, CUDA_HOME, OMP_TOOL_LIBRARIES, VLLM_LOGGING_CONFIG_PATH), or
open the engine to its API clients (VLLM_SERVER_DEV_MODE, insecure serialization, runtime LoRA
loading). Everything else (PYTHON*, LD_*, PATH, BROWSER, OPENSSL_CONF, GCONV_PATH, ...) is
refused by not being allowed. Names are case-sensitive, as the processes reading them are.

The same list holds for the stand-in (engine "sim"): it plays vLLM, so a spec moves between
the two unchanged, and it reads nothing else from its environment that a spec should set.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

ALLOWED_PREFIXES = (
    "VLLM_",
    "NCCL_",
    "RCCL_",
    "UCX_",
    "NIXL_",
    "MORI_",
    "HF_",
    "OMP_",
    "CUDA_",
    "HIP_",
    "ROCR_",
    "TORCH_NCCL_",
    "TORCH_DISTRIBUTED_",
)
ALLOWED_NAMES = frozenset(
    {
        "HF_TOKEN",
        "HF_HOME",
        "HUGGING_FACE_HUB_TOKEN",
        "TOKENIZERS_PARALLELISM",
        "TRANSFORMERS_OFFLINE",
        "TRANSFORMERS_VERBOSITY",
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_HIP_ALLOC_CONF",
        "CUBLAS_WORKSPACE_CONFIG",
        "GLOO_SOCKET_IFNAME",
        "NVIDIA_VISIBLE_DEVICES",
        "TORCH_LOGS",
        "TORCH_CPP_LOG_LEVEL",
    }
)
REFUSED_NAMES: dict[str, str] = {
    "VLLM_PLUGINS": "picks the plugins vLLM loads at start",
    "VLLM_SERVER_DEV_MODE": "opens development endpoints (collective_rpc) to API clients",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "lets the engine unpickle messages",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "lets API clients load adapters from any path",
}
# Inside an allowed prefix: names that point at something the process loads, runs or writes.
REFUSED_PATTERNS = (
    "*PLUGIN*",
    "*MODULE*",
    "*LIBRAR*",
    "*_SO",
    "*_PATH",
    "*_PATHS",
    "*_FILE",
    "*_HOME",
    "*_INCLUDE*",
)


def refusal(name: str) -> str | None:
    """Why `name` may not be in a spec's env; None when it may."""
    if name in ALLOWED_NAMES:
        return None
    if name in REFUSED_NAMES:
        return f"{name} {REFUSED_NAMES[name]}"
    if not name.startswith(ALLOWED_PREFIXES):
        return f"{name} is not an engine setting a spec may give: {allowed_summary()}"
    if pattern := next((p for p in REFUSED_PATTERNS if fnmatchcase(name, p)), None):
        return (
            f"{name} names a plugin, library, module, file or directory the engine would "
            f"load, run or write (matches {pattern})"
        )
    return None


def allowed_summary() -> str:
    prefixes = ", ".join(f"{p}*" for p in ALLOWED_PREFIXES)
    return (
        f"allowed are {prefixes} (but not names matching "
        f"{', '.join(REFUSED_PATTERNS)}) and {', '.join(sorted(ALLOWED_NAMES))}"
    )
