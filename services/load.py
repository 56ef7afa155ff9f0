"""The dashboard's load button: one bounded `pdctl bench` run per deployment against its proxy,
so a newcomer sees the charts move without a terminal. Bounded in rate, count and wall time;
the run is killed at its deadline or when the operator stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller import child_environment

ROOT = Path(__file__).resolve().parent.parent
MAX_RATE = 50.0
MAX_DURATION_S = 120.0
MAX_PROMPTS = 2000
GRACE_S = 30.0  # past the last arrival, for in-flight requests to finish


@dataclass
class LoadRun:
    deployment: str
    rate: float
    prompts: int
    started: float = field(default_factory=time.time)
    deadline_s: float = 0.0
    proc: asyncio.subprocess.Process | None = None
    result_path: Path | None = None
    state: str = "running"  # running | done | failed | stopped
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def elapsed_s(self) -> float:
        return time.time() - self.started


def bounded(rate: float, duration_s: float) -> tuple[float, int]:
    """The rate and request count actually run: within the caps, at least one request."""
    rate = min(max(rate, 0.1), MAX_RATE)
    duration_s = min(max(duration_s, 1.0), MAX_DURATION_S)
    return rate, max(1, min(MAX_PROMPTS, round(rate * duration_s)))


class LoadRuns:
    """At most one run per deployment; each watched by a task that reaps it."""

    def __init__(self) -> None:
        self.runs: dict[str, LoadRun] = {}
        self._tasks: set[asyncio.Task] = set()

    def current(self, name: str) -> LoadRun | None:
        return self.runs.get(name)

    def busy(self, name: str) -> bool:
        run = self.runs.get(name)
        return run is not None and run.state == "running"

    async def start(
        self,
        name: str,
        base_url: str,
        rate: float,
        duration_s: float,
        slo_ttft_ms: float | None,
        slo_itl_ms: float | None,
        input_len: int = 256,
        output_len: int = 64,
    ) -> LoadRun:
        rate, prompts = bounded(rate, duration_s)
        out = Path(tempfile.mkdtemp(prefix="pdctl-load-")) / "result.json"
        argv = [
            sys.executable,
            str(ROOT / "pdctl.py"),
            "bench",
            "--base-url",
            base_url,
            "--request-rate",
            f"{rate:g}",
            "--num-prompts",
            str(prompts),
            "--input-len",
            str(input_len),
            "--output-len",
            str(output_len),
            "--result-json",
            str(out),
            "--quiet",
            "--timeout",
            str(GRACE_S),
        ]
        if slo_ttft_ms:
            argv += ["--slo-ttft-ms", f"{slo_ttft_ms:g}"]
        if slo_itl_ms:
            argv += ["--slo-itl-ms", f"{slo_itl_ms:g}"]
        run = LoadRun(name, rate, prompts, deadline_s=prompts / rate + GRACE_S, result_path=out)
        run.proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=ROOT,
            env=child_environment(os.environ, {}),  # never the control plane's tokens
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self.runs[name] = run
        task = asyncio.get_running_loop().create_task(self._watch(run))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    async def stop(self, name: str) -> None:
        run = self.runs.get(name)
        if run is not None and run.state == "running" and run.proc is not None:
            run.state = "stopped"
            with contextlib.suppress(ProcessLookupError):
                run.proc.kill()

    async def close(self) -> None:
        for name in list(self.runs):
            await self.stop(name)
        for task in list(self._tasks):
            task.cancel()

    async def _watch(self, run: LoadRun) -> None:
        proc = run.proc
        if proc is None:
            return
        try:
            _, err = await asyncio.wait_for(proc.communicate(), run.deadline_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            run.state, run.error = "failed", f"killed at its deadline ({run.deadline_s:.0f} s)"
            return
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise
        if run.state == "stopped":
            return
        if proc.returncode == 0 and run.result_path and run.result_path.exists():
            data = json.loads(run.result_path.read_text())
            run.result = data[0] if isinstance(data, list) and data else data
            run.state = "done"
        else:
            run.state = "failed"
            run.error = (err or b"").decode(errors="replace").strip()[-400:] or (
                f"pdctl bench exited with {proc.returncode}"
            )
