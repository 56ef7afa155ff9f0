"""Fakes for the supervisor's seams (processes, HTTP probes, the clock) and for the proxy's
admin API as a rollout uses it."""

from __future__ import annotations

import asyncio
import signal as signals
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from controller.backends.local import LOCAL_NODE_ID, PortHolder, ProcessRecord, Where
from controller.launch.placement import Node


class FakeBackend:
    """Processes as dict entries. `obey_term=False` makes them ignore SIGTERM. With `nodes`,
    a cluster of them (processes placed by the controller; `lose_node` kills one)."""

    multi_node = False

    def __init__(self, obey_term: bool = True, nodes: list[Node] | None = None) -> None:
        self.obey_term = obey_term
        self.clustered = nodes is not None
        self.cluster = list(nodes or [Node(LOCAL_NODE_ID, "127.0.0.1", head=True)])
        self.placed: dict[str, Where] = {}  # process name -> where it was last spawned
        self.procs: dict[tuple[str, str], dict[str, Any]] = {}  # (deployment dir, name)
        self.spawned: list[tuple[str, list[str], dict[str, str]]] = []
        self.signals: list[tuple[str, int]] = []
        self.next_pid = (1 << 22) + 1000  # above any pid_max: no /proc entry (probing.py)
        self.held: dict[int, list[PortHolder]] = {}  # ports something else listens on

    @staticmethod
    def _key(run_dir: Path, name: str) -> tuple[str, str]:
        return (str(run_dir), name)

    async def nodes(self) -> list[Node]:
        return list(self.cluster)

    def home(self, nodes: list[Node]) -> Node:
        return next(n for n in nodes if n.head and n.alive)

    async def refresh(self) -> None:
        pass

    def lose_node(self, address: str) -> None:
        """The node at `address` is gone, and every process on it."""
        self.cluster = [
            replace(n, alive=False) if n.address == address else n for n in self.cluster
        ]
        for key, proc in self.procs.items():
            where = self.placed.get(key[1])
            if where is not None and where.node.address == address and proc["alive"]:
                proc["alive"], proc["code"] = False, None
                proc["record"] = replace(
                    proc["record"], lost=f"died with its node: {address} is gone", node_lost=True
                )

    async def spawn(
        self,
        run_dir: Path,
        name: str,
        argv: list[str],
        env: dict[str, str],
        where: Where | None = None,
    ) -> ProcessRecord:
        self.next_pid += 1
        if where is not None:
            self.placed[name] = where
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
        if proc.get("stale_reads", 0) > 0:  # the shim has not yet written the exit down
            proc["stale_reads"] -= 1
            return replace(proc["record"], exited=False, exit_code=None)
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

    def crash(self, name: str, code: int = -9, stale_reads: int = 0) -> None:
        """`stale_reads`: that many reads still show it alive-looking, as when the state file
        is read just before the shim writes the exit code down and goes."""
        proc = next(p for (_, n), p in self.procs.items() if n == name)
        proc["alive"], proc["code"], proc["stale_reads"] = False, code, stale_reads

    def pid(self, name: str) -> int:
        return next(p["record"].child_pid for (_, n), p in self.procs.items() if n == name)


class FakeProbe:
    """Every spawned URL is healthy unless listed in `down`; registrations are explicit."""

    def __init__(self) -> None:
        self.down: set[int] = set()  # ports that refuse
        self.silent: set[int] = set()  # ports that give no answer in time
        self.registered: set[int] = set()  # ports the proxy lists (MoRIIO)
        self.outstanding: dict[int, int] = {}
        self.drains: list[tuple[int, bool]] = []
        self.tokens: list[str | None] = []  # the admin token of every admin call, in order
        self.proxy_up = True
        self.refusals: list[dict[str, Any]] = []  # what GET /admin/registry lists
        self.transfer_failures: dict[int, float] = {}  # port -> failed KV transfers (/metrics)
        # (prefill port, decode port) -> a pinned check's (status, message), or the failed
        # transfers it adds (a connector that recomputes answers 200)
        self.pair_answers: dict[tuple[int | None, int | None], Any] = {}
        self.pair_checks: list[tuple[int | None, int | None]] = []

    async def healthy(self, url: str) -> bool | None:
        port = urlsplit(url).port
        return None if port in self.silent else port not in self.down

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

    async def failed_transfers(self, url: str) -> float | None:
        return self.transfer_failures.get(urlsplit(url).port)

    async def pair_check(
        self,
        proxy_url: str,
        token: str | None,
        prefill_url: str,
        decode_url: str,
        body: dict,
        timeout: float,
    ) -> tuple[int | None, str]:
        """What `pair_answers` says for (prefill port, decode port); no answer by default."""
        key = (urlsplit(prefill_url).port, urlsplit(decode_url).port)
        self.pair_checks.append(key)
        answer = self.pair_answers.get(key, (None, "no answer"))
        if isinstance(answer, float):  # failed transfers this check adds at the decode
            self.transfer_failures[key[1]] = self.transfer_failures.get(key[1], 0.0) + answer
            return 200, ""
        return answer

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


# -- the rollout engine's seam to the proxy (controller/switch/steps.py AdminCalls) -------------


class FakeProxyAdmin:
    """The proxy's admin API as a rollout uses it, over a real Supervisor's status: each
    process is listed in its launch's mode group, healthy once RUNNING. `log` keeps every
    call in order. `fail[call]` makes that call raise; `hang[call] = n` lets n such calls
    answer and holds the rest until `released` is set;
    `refuse[name] = mode` never lists that instance healthy in that mode (the proxy refuses
    it, as one whose registration it does not expect)."""

    def __init__(self, fleet: Any, name: str) -> None:
        self.fleet, self.name = fleet, name
        self.log: list[tuple[Any, ...]] = []
        self.paused: set[str] = set()
        self.drained: set[str] = set()
        self.whole: set[str] = set()
        self.added: set[str] = set()
        self.removed: set[str] = set()
        # None: it lists every process the supervisor runs, as its role; else exactly these
        # (URL -> role), changed by add and remove, as a proxy told its instances.
        self.listing: dict[str, str] | None = None
        self.outstanding: dict[str, int] = {}  # url -> requests in flight
        self.refuse: dict[str, str] = {}
        self.expected: list[dict[str, Any]] | None = None
        self.rejected_count = 0
        self.fail: dict[str, BaseException] = {}
        self.hang: dict[str, int] = {}
        self.released = asyncio.Event()
        self.held: dict[str, asyncio.Event] = {}
        self.closed = 0

    async def reached(self, call: str) -> None:
        """Until a `call` is held (see `hang`)."""
        await self.held.setdefault(call, asyncio.Event()).wait()

    async def _call(self, *what: Any) -> None:
        made = sum(1 for e in self.log if e[0] == what[0])
        self.log.append(what)
        if what[0] in self.hang and made >= self.hang[what[0]] and not self.released.is_set():
            self.held.setdefault(what[0], asyncio.Event()).set()
            await self.released.wait()
        if what[0] in self.fail:
            raise self.fail[what[0]]

    async def instances(self) -> list[dict[str, Any]]:
        await self._call("instances")
        out = []
        for unit in self.fleet.status(self.name):
            if unit["name"] == "proxy":
                continue
            if self.listing is not None and unit["url"] not in self.listing:
                continue
            group = unit["mode"] or "read"
            refused = self.refuse.get(unit["name"]) == group
            out.append(
                {
                    "url": unit["url"],
                    "role": (self.listing or {}).get(unit["url"], unit["role"]),
                    "group": group,
                    "healthy": unit["state"] == "RUNNING" and not refused,
                    "draining": unit["url"] in self.drained,
                    "whole": unit["url"] in self.whole,
                    "outstanding_requests": self.outstanding.get(unit["url"], 0),
                }
            )
        running = {unit["url"] for unit in self.fleet.status(self.name)}
        for url, role in (self.listing or {}).items():  # listed, nothing runs there
            if url not in running:
                out.append({"url": url, "role": role, "group": "read", "healthy": False})
        return out

    async def pause(self, group: str) -> None:
        await self._call("pause", group)
        self.paused.add(group)

    async def resume(self, group: str) -> None:
        await self._call("resume", group)
        self.paused.discard(group)

    async def drain(self, url: str) -> bool:
        await self._call("drain", url)
        self.drained.add(url)
        return True

    async def undrain(self, url: str) -> bool:
        await self._call("undrain", url)
        self.drained.discard(url)
        return True

    async def set_whole(self, url: str, whole: bool) -> bool:
        await self._call("whole", url, whole)
        (self.whole.add if whole else self.whole.discard)(url)
        return True

    async def add(self, url: str, role: str) -> None:
        await self._call("add", url, role)
        self.added.add(url)
        if self.listing is not None:
            self.listing[url] = role

    async def remove(self, url: str) -> bool:
        await self._call("remove", url)
        self.removed.add(url)
        if self.listing is not None:
            self.listing.pop(url, None)
        return True

    async def expect(self, registrations: list[dict[str, Any]] | None) -> None:
        modes = tuple(sorted({m for r in registrations or [] for m in r["modes"]}))
        await self._call("expect", modes)
        self.expected = registrations

    async def rejected(self) -> int:
        await self._call("rejected")
        return self.rejected_count

    async def aclose(self) -> None:
        self.closed += 1

    def routing_restored(self) -> bool:
        return not (self.paused or self.drained or self.whole)
