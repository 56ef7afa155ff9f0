"""The processes `make bench-proxy` runs: servers pinned to a core, their CPU time, and the
command line of each PD proxy it compares (pdctl, vllm-router, the FastAPI+httpx baseline).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROXY_CORE, LOAD_CORE = 0, 1
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pinned(core: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > max(PROXY_CORE, LOAD_CORE):
        return ["taskset", "-c", str(core)]
    return []


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Server:
    def __init__(
        self, name: str, argv: list[str], port: int, core: int, logs: Path, env: dict | None = None
    ) -> None:
        self.name, self.port = name, port
        self.url = f"http://127.0.0.1:{port}"
        with open(logs / f"{name}.log", "wb") as out:
            self.proc = subprocess.Popen(
                [*pinned(core), *argv],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        self.logs = logs

    def wait_healthy(self, timeout: float = 30.0) -> Server:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not healthy: {self.log()}")

    def log(self) -> str:
        return (self.logs / f"{self.name}.log").read_text()[-1500:]

    def cpu_seconds(self) -> float:
        # taskset execs the program in place: the pid is the program's own
        return cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)


def pdctl(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "pdctl.py"), *args]


def router_binary() -> str:
    return str(Path(sys.executable).parent / "vllm-router")


def router_installed() -> bool:
    return Path(router_binary()).exists()


def pd_proxies(prefill: str, decode: str) -> dict[str, Callable[[int], list[str]]]:
    """The command line of each NIXL PD proxy compared, by name, given its port."""
    return {
        "pdctl": lambda port: pdctl(
            "proxy",
            *("--port", str(port), "--registry-port", "-1"),
            *("--prefill", prefill, "--decode", decode),
        ),
        "vllm-router": lambda port: [
            router_binary(),
            *("--vllm-pd-disaggregation", "--kv-connector", "nixl", "--policy", "round_robin"),
            *("--prefill", prefill, "--decode", decode, "--port", str(port)),
            *("--prometheus-port", str(free_port()), "--log-level", "warning"),
        ],
        "baseline": lambda port: [
            sys.executable,
            *("-m", "benchmarks.proxy.baseline", str(port), prefill, decode),
        ],
    }
