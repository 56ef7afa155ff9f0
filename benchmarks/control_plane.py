"""A `pdctl serve` as the benchmarks drive it: JSON calls, waiting for states."""

from __future__ import annotations

import json
import time
from typing import Any

from harness.processes import http_get, http_post

STOPPED = ("STOPPED", "EXITED", "FATAL")


def api(base: str, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
    if method == "GET":
        status, raw = http_get(base + "/api" + path, timeout=30)
        return status, json.loads(raw or b"null")
    return http_post(base + "/api" + path, body or {}, timeout=60)


def wait_running(base: str, name: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, units = api(base, "GET", f"/deployments/{name}/status")
        if units and all(u["state"] == "RUNNING" for u in units):
            return
        time.sleep(0.3)
    raise TimeoutError(f"{name} not running after {timeout} s")


def stop_and_wait(base: str, name: str, timeout: float = 60) -> None:
    """Stop a deployment and wait until its processes are gone (they outlive `pdctl serve`)."""
    api(base, "POST", f"/deployments/{name}/stop")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, units = api(base, "GET", f"/deployments/{name}/status")
        if all(u["state"] in STOPPED for u in units):
            return
        time.sleep(0.3)
