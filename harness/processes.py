"""Real pdctl processes for end-to-end tests: start on free loopback ports, wait, stop."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


_HANDED_OUT: set[int] = set()
# Not the module's global random: Hypothesis seeds that one for each example it runs (tests/model/),
# and two test processes seeded alike would draw the same ports.
_PICK = random.SystemRandom()
_RANGES: list[int] = []  # PDCTL_PORT_RANGE bases not yet handed out


def worker_share(low: int, high: int) -> tuple[int, int]:
    """This test worker's slice of [low, high): under pytest-xdist each worker
    draws ports from its own slice, so two workers never hand out one port (each worker's
    memory of what it handed out is its own)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    size = (high - low) // max(count, 1)
    return low + index * size, low + (index + 1) * size


def free_port() -> int:
    """A port nothing listens on, for a server a test starts next. Drawn below Linux's
    ephemeral range (32768-60999) and below port_range()'s: a port the kernel handed out
    would be free to any outgoing connection between this check and the server's bind.
    Never the same port twice in one run: a test drawing several ports before starting
    anything would otherwise, once in a few hundred draws, get one port for two servers."""
    low, high = worker_share(10000, 20000)
    for _ in range(200):
        port = _PICK.randrange(low, high)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no free port in {low}-{high - 1}")


def port_range() -> str:
    """A PDCTL_PORT_RANGE of 500 ports for one control plane: below Linux's ephemeral range
    (32768-60999), where every outgoing connection takes its port, and above free_port()'s,
    so an instance's allocated port is never one another socket happens to hold."""
    if not _RANGES:  # every base once, in a random order: two planes in a test never share
        low, high = worker_share(20000, 32000)
        _RANGES.extend(_PICK.sample(range(low, high - 499, 500), (high - low) // 500))
    base = _RANGES.pop()
    return f"{base}-{base + 499}"


# The admin token the tests' standalone proxies get (in their environment, as pdctl serve
# hands it over), and the header that carries it.
ADMIN_TOKEN = "test-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def run_pdctl(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """`pdctl ARGS` run to its end from the checkout, its output captured as text."""
    return subprocess.run(
        [sys.executable, str(ROOT / "pdctl.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def http_get(url: str, timeout: float = 5.0, headers: dict | None = None) -> tuple[int, bytes]:
    try:
        req = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def http_post(
    url: str,
    body: dict | bytes,
    timeout: float = 30.0,
    headers: dict | None = None,
    method: str = "POST",
) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


class Process:
    def __init__(
        self,
        args: list[str],
        port: int,
        env: dict | None = None,
        log_path: Path | None = None,
        cwd: Path = ROOT,
        host: str = "127.0.0.1",  # where it answers: another loopback address is another "node"
    ) -> None:
        self.args, self.port = args, port
        self.url = f"http://{host}:{port}"
        self.log_path = log_path
        out = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "pdctl.py"), *args],
                cwd=cwd,
                env={**os.environ, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            if not isinstance(out, int):  # a log file (else DEVNULL)
                out.close()  # the child holds its own copy

    def wait_healthy(self, timeout: float = 20.0) -> Process:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.args[0]} exited with {self.proc.returncode}: {self.log()}"
                )
            try:
                if http_get(self.url + "/health", timeout=1.0)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.args} not healthy after {timeout}s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text()[-2000:] if self.log_path else ""

    def metrics(self) -> str:
        return http_get(self.url + "/metrics")[1].decode()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()


def reap_instances(runtime_dir: Path) -> int:
    """Kill what a control plane's shims started under `runtime_dir` and left running:
    instances outlive `pdctl serve` by design, so a test that fails before stopping its
    deployment would leave them holding ports. Only pdctl processes are signalled: those the
    state files name, and any shim still running under `runtime_dir` with its child (one a
    rollout replaced while it was still starting is named by no state file)."""
    pids: set[int] = set()
    for state_file in runtime_dir.glob("*/*/state.json"):
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue
        pids.update(
            p for p in (state.get("child_pid"), state.get("shim_pid")) if isinstance(p, int)
        )
    pids.update(_shims_and_children(f"{runtime_dir}/".encode()))
    killed = 0
    for pid in sorted(pids):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"pdctl.py" in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def _shims_and_children(run_dir: bytes) -> set[int]:
    """`pdctl run-instance --run-dir RUN_DIR/...` processes and their children, from /proc."""
    parents: dict[int, int] = {}
    shims = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        if b"run-instance" in cmdline and run_dir in cmdline:
            shims.add(int(entry.name))
    return shims | {pid for pid, parent in parents.items() if parent in shims}


@contextmanager
def running(*procs: Process):
    try:
        for p in procs:
            p.wait_healthy()
        yield procs
    finally:
        for p in procs:
            p.stop()


def sim(
    tmp_path: Path,
    name: str,
    *flags: str,
    env: dict | None = None,
    port: int | None = None,
    host: str | None = None,
) -> Process:
    """`pdctl sim`; with `host`, bound there (`--host`) instead of vLLM's default."""
    port = port or free_port()
    args = ["sim", "--port", str(port), *(("--host", host) if host else ()), *flags]
    return Process(args, port, env=env, log_path=tmp_path / f"{name}.log", host=host or "127.0.0.1")


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def finally_on_sigterm() -> None:
    """Turn SIGTERM (`timeout`, CI's kill) into SystemExit, so that every `finally` runs and a
    benchmark stops what it started instead of orphaning it."""

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
