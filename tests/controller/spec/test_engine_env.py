"""The engine env allowlist: the names of one table, each by what it does; anything else refused."""

from __future__ import annotations

import pytest

from controller.spec.engine_env import refusal


@pytest.mark.parametrize(
    "name",
    [
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_NIXL_SIDE_CHANNEL_HOST",
        "VLLM_CPU_OMP_THREADS_BIND",
        "VLLM_LOGGING_LEVEL",
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
        "UCX_SOME_FUTURE_KNOB",  # a family is open only as far as its vetted names
        "VLLM_ATTENTION_BACKEND",  # vLLM 0.32 reads no such variable
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "BROWSER",
        "OPENSSL_CONF",
        "GCONV_PATH",
        "LD_PRELOAD",
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
    assert "controller/spec/surface/env.txt" in message


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
        "NCCL_TUNER_PLUGIN",
        "LD_LIBRARY_PATH",
        "UCX_GDB_COMMAND",
        "HF_ENDPOINT",
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
