"""Fakes for the supervisor's seams: processes, HTTP probes, the clock."""

from __future__ import annotations

import asyncio
import signal as signals
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from controller.process_backend import PortHolder, ProcessRecord


class FakeBackend:
    """Processes as dict entries. `obey_term=False` makes them ignore SIGTERM."""

    def __init__(self, obey_term: bool = True) -> None:
        self.obey_term = obey_term
        self.procs: dict[tuple[str, str], dict[str, Any]] = {}  # (deployment dir, name)
        self.spawned: list[tuple[str, list[str], dict[str, str]]] = []
        self.signals: list[tuple[str, int]] = []
        self.next_pid = 1000
        self.held: dict[int, list[PortHolder]] = {}  # ports something else listens on

    @staticmethod
    def _key(run_dir: Path, name: str) -> tuple[str, str]:
        return (str(run_dir), name)

    async def spawn(
        self, run_dir: Path, name: str, argv: list[str], env: dict[str, str]
    ) -> ProcessRecord:
        self.next_pid += 1
        record = ProcessRecord(
            name, self.next_pid, child_start_time=self.next_pid, started_at=0.0, argv=tuple(argv)
        )
        self.procs[self._key(run_dir, name)] = {"record": record, "alive": True, "code": None}
        self.spawned.append((name, argv, env))
        return record

    def read(self, run_dir: Path, name: str) -> ProcessRecord | None:
        proc = self.procs.get(self._key(run_dir, name))
        if proc is None:
            return None
        return replace(proc["record"], exited=not proc["alive"], exit_code=proc["code"])

    def _by_pid(self, pid: int | None) -> dict[str, Any] | None:
        return next((p for p in self.procs.values() if p["record"].child_pid == pid), None)

    def running(self, record: ProcessRecord) -> bool:
        proc = self._by_pid(record.child_pid)
        return bool(proc and proc["alive"])

    def signal(self, record: ProcessRecord, signum: int) -> None:
        proc = self._by_pid(record.child_pid)
        if proc is None or not proc["alive"]:
            return
        self.signals.append((record.name, signum))
        if signum == signals.SIGKILL or self.obey_term:
            proc["alive"], proc["code"] = False, -signum

    def forget(self, run_dir: Path, name: str) -> None:
        proc = self.procs.get(self._key(run_dir, name))
        if proc is not None and not proc["alive"]:
            del self.procs[self._key(run_dir, name)]

    def log_tail(self, run_dir: Path, name: str, lines: int) -> list[str]:
        return [f"{name} line {i}" for i in range(lines)]

    def port_holders(self, port: int) -> list[PortHolder]:
        return self.held.get(port, [])

    def crash(self, name: str, code: int = -9) -> None:
        proc = next(p for (_, n), p in self.procs.items() if n == name)
        proc["alive"], proc["code"] = False, code

    def pid(self, name: str) -> int:
        return next(p["record"].child_pid for (_, n), p in self.procs.items() if n == name)


class FakeProbe:
    """Every spawned URL is healthy unless listed in `down`; registrations are explicit."""

    def __init__(self) -> None:
        self.down: set[int] = set()  # ports that do not answer
        self.registered: set[int] = set()  # ports the proxy lists (MoRIIO)
        self.outstanding: dict[int, int] = {}
        self.drains: list[tuple[int, bool]] = []
        self.tokens: list[str | None] = []  # the admin token of every admin call, in order
        self.proxy_up = True
        self.refusals: list[dict[str, Any]] = []  # what GET /admin/registry lists

    async def healthy(self, url: str) -> bool:
        return urlsplit(url).port not in self.down

    async def proxy_instances(
        self, proxy_url: str, token: str | None
    ) -> list[dict[str, Any]] | None:
        self.tokens.append(token)
        if not self.proxy_up:
            return None
        ports = self.registered | set(self.outstanding)
        return [
            {"url": f"http://127.0.0.1:{p}", "outstanding_requests": self.outstanding.get(p, 0)}
            for p in sorted(ports)
        ]

    async def proxy_refusals(
        self, proxy_url: str, token: str | None
    ) -> list[dict[str, Any]] | None:
        return list(self.refusals) if self.proxy_up else None

    async def set_draining(
        self, proxy_url: str, token: str | None, instance_url: str, draining: bool
    ) -> bool:
        self.tokens.append(token)
        self.drains.append((urlsplit(instance_url).port, draining))
        return True

    async def aclose(self) -> None:
        return None


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        self.t += seconds
