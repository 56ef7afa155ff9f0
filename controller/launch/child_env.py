"""The environment every supervised process (shim, engine, stand-in, proxy) starts with: the few
variables of ours it needs to run, then the deployment's own entries and what pdctl sets.

Nothing else of the control plane's environment reaches a child: not its tokens
(PDCTL_OPERATOR_TOKENS, PDCTL_VIEWER_TOKENS), not a cloud credential someone exported in the
shell that started `pdctl serve`. A child that needs more gets it from the deployment's env.
"""

from __future__ import annotations

from collections.abc import Mapping

# Passed through by name when set in the control plane's environment.
PASSTHROUGH = frozenset(
    {
        # Finding programs and the user's files.
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "TMPDIR",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",  # ROCm and CUDA libraries outside the loader's default paths
        # Text and time.
        "LANG",
        "LANGUAGE",
        "TZ",
        # Where models and caches are kept (an engine downloads there, or finds them there).
        "HF_HOME",
        "XDG_CACHE_HOME",
        # Reaching the network the way this host does (model downloads).
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        # Stand-in knobs `make chaos` sets on the control plane for its stand-ins.
        "PDCTL_SIM_FAULT_INJECTION",
        "PDCTL_SIM_KV_STALE_PEER",
        "VLLM_LOG_STATS_INTERVAL",
    }
)
PASSTHROUGH_PREFIXES = ("LC_",)  # locale categories


def passes_through(name: str) -> bool:
    return name in PASSTHROUGH or name.startswith(PASSTHROUGH_PREFIXES)


def child_environment(parent: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """What a child starts with: the passthrough part of `parent`, then `own` (the launch's
    env: the deployment's entries and pdctl's), which wins on a clash."""
    return {**{k: v for k, v in parent.items() if passes_through(k)}, **own}
