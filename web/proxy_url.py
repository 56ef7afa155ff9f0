"""Where a deployment's proxy is reached: the supervisor's view (on a cluster, its node's
address), else this host's loopback at the proxy's port."""

from __future__ import annotations

from typing import Any


def proxy_url(app_state: Any, name: str, port: int) -> str:
    supervisor = getattr(getattr(app_state, "controller", None), "supervisor", None)
    if supervisor is not None:
        url = supervisor.proxy_url(name)
        if url:
            return url
    return f"http://127.0.0.1:{port}"
