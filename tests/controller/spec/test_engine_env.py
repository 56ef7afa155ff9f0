"""The engine env allowlist: documented prefixes and names, minus what loads or runs code."""

from __future__ import annotations

import pytest

from controller.spec.engine_env import refusal


@pytest.mark.parametrize(
    "name",
    [
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_NIXL_SIDE_CHANNEL_HOST",
        "VLLM_CPU_OMP_THREADS_BIND",
        "VLLM_ATTENTION_BACKEND",
        "VLLM_ROCM_USE_AITER",
        "MORI_DISABLE_AUTO_XGMI",
        "NCCL_SOCKET_IFNAME",
        "UCX_TLS",
        "NIXL_LOG_LEVEL",
        "HF_TOKEN",
        "HF_HOME",
        "HF_HUB_OFFLINE",
        "OMP_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "TOKENIZERS_PARALLELISM",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    ],
)
def test_engine_settings_are_allowed(name: str) -> None:
    assert refusal(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "PYTHONWARNINGS",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "BROWSER",
        "OPENSSL_CONF",
        "GCONV_PATH",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "PATH",
        "BASH_ENV",
        "GREETING",
        "vllm_cpu_kvcache_space",  # names are case-sensitive
        "PDCTL_OPERATOR_TOKENS",
        "PDCTL_SIM_FAULT_INJECTION",
    ],
)
def test_anything_else_is_refused_by_not_being_allowed(name: str) -> None:
    message = refusal(name)
    assert message is not None and message.startswith(f"{name} is not an engine setting")
    assert "VLLM_*" in message and "HF_TOKEN" in message


@pytest.mark.parametrize(
    "name",
    [
        "VLLM_PLUGINS",
        "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_SERVER_DEV_MODE",
        "VLLM_ALLOW_INSECURE_SERIALIZATION",
        "VLLM_NCCL_SO_PATH",
        "VLLM_CUDART_SO_PATH",
        "VLLM_RUST_FRONTEND_PATH",
        "NCCL_NET_PLUGIN",
        "NCCL_DEBUG_FILE",
        "UCX_MODULE_DIR",
        "NIXL_PLUGIN_DIR",
        "CUDA_HOME",
        "CUDA_INJECTION64_PATH",
        "OMP_TOOL_LIBRARIES",
        "HF_MODULES_CACHE",
    ],
)
def test_code_loaders_inside_allowed_prefixes_are_refused(name: str) -> None:
    message = refusal(name)
    assert message is not None and message.startswith(name)
    assert "is not an engine setting" not in message
