"""A real `pdctl serve` for end-to-end tests and benchmarks: its own database, runtime dir and
port range in a temporary folder, and the calls tests make of it."""

from __future__ import annotations

import contextlib
import json
import signal
import time
import urllib.error
from pathlib import Path
from typing import Any, Self

from controller.supervise import run_state
from harness.processes import Process, free_port, http_get, http_post, port_range, reap_instances


class ServeStalled(AssertionError):
    """`pdctl serve` took a call but did not answer it in time: the message carries every
    thread's stack (SIGUSR1, web/process/stall_dump.py) and the tail of its log, what a CI run
    keeps of such a stall. Not an OSError: a refused connection (a server that is down)
    is one, and callers that wait for a server to come back take those as "not yet"."""

    def __init__(self, what: str, plane: ControlPlane) -> None:
        super().__init__(f"pdctl serve stalled: {what}\n{plane.stacks()}")


class ControlPlane:
    def __init__(self, tmp: Path, env: dict[str, str] | None = None) -> None:
        self.tmp, self.port = tmp, free_port()
        self.db = tmp / "pdctl.db"
        # A port range of its own, so that concurrent runs do not collide.
        self.env = {
            "PDCTL_RUNTIME_DIR": str(tmp / "runs"),
            "PDCTL_PORT_RANGE": port_range(),
            "PDCTL_SIM_REGISTRATION_INTERVAL": "0.3",
            **(env or {}),
        }
        self.proc: Process | None = None
        self.read_timeout, self.write_timeout = 30.0, 60.0  # s, per API call

    def start(self, timeout: float = 60) -> Self:
        self.proc = Process(
            ["serve", "--port", str(self.port), "--db", str(self.db)],
            self.port,
            env=self.env,
            log_path=self.tmp / f"serve-{time.monotonic_ns()}.log",
        )
        self.proc.wait_healthy(timeout)
        return self

    @property
    def server(self) -> Process:
        """The `pdctl serve` process that start() started."""
        if self.proc is None:
            raise RuntimeError("ControlPlane: start() it first")
        return self.proc

    def close(self) -> None:
        """Stop `pdctl serve`, then anything of its deployments still running."""
        if self.proc is not None:
            self.proc.stop()
        reap_instances(self.tmp / "runs")

    def admin_headers(self, name: str) -> dict[str, str]:
        """What a deployment's proxy's /admin takes: the token the controller gave it."""
        token = (self.tmp / "runs" / name / run_state.ADMIN_TOKEN_FILE).read_text()
        return {"Authorization": f"Bearer {token}"}

    def api(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        url = self.server.url + "/api" + path
        timeout = self.read_timeout if method == "GET" else self.write_timeout
        try:
            if method == "GET":
                status, raw = http_get(url, timeout=timeout)
                return status, json.loads(raw or b"null")
            return http_post(url, body or {}, timeout=timeout, method=method)
        except TimeoutError:
            raise ServeStalled(f"{method} {path}: no answer within {timeout:g} s", self) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise ServeStalled(
                    f"{method} {path}: not connected within {timeout:g} s", self
                ) from None
            raise

    def stacks(self, lines: int = 300) -> str:
        """Every thread's stack in `pdctl serve` now, with the log lines before them."""
        proc = self.proc
        if proc is None or proc.log_path is None or proc.proc.poll() is not None:
            return "(pdctl serve is not running)"
        with contextlib.suppress(ProcessLookupError):
            proc.proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)  # faulthandler writes from the signal handler at once
        tail = proc.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(tail)

    def status(self, name: str) -> dict[str, dict]:
        """Units by name; empty when the deployment or the server is not there."""
        try:
            code, units = self.api("GET", f"/deployments/{name}/status")
        except OSError:
            return {}
        return {u["name"]: u for u in units} if code == 200 else {}

    def wait(self, name: str, predicate, timeout: float = 60.0) -> dict[str, dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            units = self.status(name)
            if units and predicate(units):
                return units
            time.sleep(0.2)
        raise TimeoutError(f"{name}: {self.status(name)}")

    def running(self, name: str, timeout: float = 60.0) -> dict[str, dict]:
        return self.wait(
            name, lambda us: all(u["state"] == "RUNNING" for u in us.values()), timeout
        )

    def rolled_out(self, name: str, timeout: float = 120.0) -> dict:
        """Wait until no rollout of `name` runs; the last one's record (it must be done)."""
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.api("GET", f"/deployments/{name}/rollout")
            assert status == 200, body
            rollout = body["rollout"]
            if rollout is None or rollout["state"] != "running":
                break
            assert time.monotonic() < deadline, f"{name}: rollout still running: {rollout}"
            time.sleep(0.2)
        assert rollout is None or rollout["state"] == "done", rollout
        return rollout or {}

    def switch(self, name: str, mode: str, strategy: str, timeout: float = 120) -> dict:
        status, record = self.api(
            "POST",
            f"/deployments/{name}/switch",
            {"mode": mode, "strategy": strategy, "reason": "test"},
        )
        assert status == 202, record
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, record = self.api("GET", f"/deployments/{name}/switches/{record['id']}")
            if record["state"] != "running":
                return record
            time.sleep(0.2)
        raise TimeoutError(record)
