"""The real-vLLM harness: where `make test-vllm` put the vLLM venv and the tiny model, the
deployment specs the tests create through pdctl's REST API, and the /proc checks that nothing
of an instance outlives its stop.

Every wait is bounded; a deployment that fails to start fails at once with its log tail.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from harness.control_plane import ControlPlane
from harness.processes import ROOT, http_get, http_post

FIXTURES = ROOT / "tests" / "fixtures" / "vllm"
CACHE = Path.home() / ".cache" / "pdctl"
# Every process of a deployment under test inherits this variable; /proc finds them by it.
MARKER = "PDCTL_VLLM_TEST_RUN"
# From the start request to the first request served: a pair takes 70-130 s here, more when
# the machine is busy. Processes RUNNING is not vLLM ready: loading the model on a busy core
# took over 90 s after that in CI, so the serving wait shares this one deadline.
START_TIMEOUT_S = 420.0
STOP_TIMEOUT_S = 90.0  # drain + SIGTERM (30 s grace) + SIGKILL
SERVE_TIMEOUT_S = 90.0  # a proxy on engines already healthy answers within this
# Prompts: word salad, several hundred tokens (several 128-token CPU blocks) each.
SALAD = (
    "the cache block token layer prefill decode engine request stream queue batch model "
    "tensor kernel memory transfer proxy latency throughput scheduler worker shard rank "
    "python server client socket buffer handshake notify metric counter gauge histogram"
)


def vllm_python() -> Path:
    """The vLLM venv's python: PDCTL_VLLM_PYTHON, else where setup_venv.sh puts it."""
    if os.environ.get("PDCTL_VLLM_PYTHON"):
        return Path(os.environ["PDCTL_VLLM_PYTHON"])
    key = hashlib.sha256((FIXTURES / "requirements.txt").read_bytes()).hexdigest()[:12]
    return CACHE / f"vllm-venv-{key}" / "bin" / "python"


def tiny_model() -> Path:
    """The tiny Llama: PDCTL_TINY_MODEL, else where `make test-vllm` caches it (keyed on the
    hash of make_tiny_model.py)."""
    if os.environ.get("PDCTL_TINY_MODEL"):
        return Path(os.environ["PDCTL_TINY_MODEL"])
    key = hashlib.sha1((FIXTURES / "make_tiny_model.py").read_bytes()).hexdigest()[:12]
    return CACHE / f"tiny-llama-{key}"


def prompt(seed: int, words: int = 300) -> str:
    rng, vocabulary = random.Random(seed), SALAD.split()
    return " ".join(rng.choice(vocabulary) for _ in range(words))


# The engines yield the CPU to everything else under contention: two CPU vLLM engines keep
# this 2-core machine at a load of 13-17, and at the same priority `pdctl serve`, its proxy
# and the test's own client went unscheduled for seconds at a time (a call to the control
# plane unanswered for 30 s; even a shell loop sampling it paused for 11 s).
# `nice` orders the engine below its own shim; across sessions the autogroup decides
# (tests/vllm/autogroup.py lowers each engine's session).
ENGINE_NICE = ("nice", "-n", "10")
# Even so, a call to the control plane was once unanswered for 30 s while two engines ran:
# the serve made progress (its stall dumps caught it in three different places) but got too
# little CPU. The suite waits this long for an answer; a longer stall still fails with stacks.
PLANE_TIMEOUT_S = 90.0


# Deployment specs -------------------------------------------------------------------------


def base_env(marker: str) -> dict[str, str]:
    # 1 GiB of KV cache per instance; side channel on loopback (vLLM's default is localhost).
    return {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
        MARKER: marker,
    }


# The marker is no engine setting, so the engine env allowlist refuses it: the specs allow it
# by name, as an operator would, and the control plane runs with overrides on (conftest).
MARKER_OVERRIDE = {
    "env": [MARKER],
    "reason": "test run marker: the tests find their processes by it",
}


def colocated_spec(name: str, model: Path, marker: str) -> dict:
    return {
        "name": name,
        "engine": "vllm",
        "model": str(model),
        "topology": "colocated",
        "max_model_len": 2048,
        "extra_args": ["--dtype", "bfloat16"],
        "env": base_env(marker),
        "unsafe_allow": MARKER_OVERRIDE,
        "groups": [
            {"name": "colo", "role": "colocated", "env": {"VLLM_CPU_OMP_THREADS_BIND": "0"}}
        ],
    }


def pd_spec(
    name: str,
    model: Path,
    marker: str,
    connector: str,
    kv_extra: dict | None = None,
    canary_interval_s: float = 0,
) -> dict:
    """1 prefill on core 0, 1 decode on core 1 (no --enforce-eager: bf16 eager crashed).
    The canary is off unless asked for: its requests would move KV between a test's
    before and after metric snapshots (52 prompt tokens more than the test's own request)."""
    spec = {
        "name": name,
        "engine": "vllm",
        "model": str(model),
        "topology": "disaggregated",
        "connector": connector,
        "max_model_len": 2048,
        "extra_args": ["--dtype", "bfloat16"],
        "env": base_env(marker),
        "unsafe_allow": MARKER_OVERRIDE,
        "canary": {"interval_s": canary_interval_s},
        "groups": [
            {"name": "prefill", "role": "prefill", "env": {"VLLM_CPU_OMP_THREADS_BIND": "0"}},
            {"name": "decode", "role": "decode", "env": {"VLLM_CPU_OMP_THREADS_BIND": "1"}},
        ],
    }
    if kv_extra:
        spec["kv_connector_extra_config"] = kv_extra
    return spec


# Running deployments ----------------------------------------------------------------------


@dataclass
class Live:
    """A started deployment: its proxy, instance URLs and the process groups it spawned."""

    plane: ControlPlane
    name: str
    proxy_port: int
    urls: dict[str, str]  # instance name -> URL
    groups: set[int] = field(default_factory=set)  # pgid of every instance (and the proxy)
    sessions: set[int] = field(default_factory=set)  # session of every shim
    proxy_host: str = "127.0.0.1"  # its node's address when placed on a cluster

    @property
    def proxy_url(self) -> str:
        return f"http://{self.proxy_host}:{self.proxy_port}"

    def metrics(self, instance: str) -> str:
        status, body = http_get(self.urls[instance] + "/metrics", timeout=10)
        assert status == 200, body[:200]
        return body.decode()


# Seconds from the start request to the first request served, per deployment (for the summary).
START_TIMES: dict[str, float] = {}


def start(plane: ControlPlane, spec: dict, model: Path) -> Live:
    status, created = plane.api("POST", "/deployments", spec)
    assert status == 201, created
    name = spec["name"]
    began = time.monotonic()
    status, body = plane.api("POST", f"/deployments/{name}/start")
    assert status == 202, body
    deadline = began + START_TIMEOUT_S
    units = wait_running(plane, name, deadline)
    live = Live(
        plane,
        name,
        created["ports"]["proxy"],
        {n: u["url"] for n, u in units.items() if u["role"] != "proxy"},
        proxy_host=units["proxy"]["address"] or "127.0.0.1",
    )
    for unit in units.values():
        with contextlib.suppress(ProcessLookupError):
            live.groups.add(os.getpgid(unit["pid"]))
            live.sessions.add(os.getsid(unit["pid"]))
    wait_serving(live, spec["model"], deadline)
    START_TIMES[name] = time.monotonic() - began
    return live


def failed_units(plane: ControlPlane, name: str, restarts_fail: bool = True) -> dict[str, dict]:
    """The units' status; AssertionError with their log tails once any has failed or (unless
    a test restarted it on purpose) restarted: a start that failed fails at once."""
    units = plane.status(name)
    failed = [
        n
        for n, u in units.items()
        if u["state"] in ("FATAL", "BACKOFF", "EXITED") or (restarts_fail and u["restarts"])
    ]
    if failed:
        raise AssertionError(
            f"{name}: {failed} failed to start: {units}\n"
            + "\n".join(log_tail(plane, name, n) for n in failed)
        )
    return units


def wait_running(
    plane: ControlPlane, name: str, deadline: float, restarts_fail: bool = True
) -> dict[str, dict]:
    while time.monotonic() < deadline:
        units = failed_units(plane, name, restarts_fail)
        if units and all(u["state"] == "RUNNING" for u in units.values()):
            return units
        time.sleep(1.0)
    raise TimeoutError(f"{name} not running after {START_TIMEOUT_S} s: {plane.status(name)}")


def wait_serving(live: Live, model: str, deadline: float, restarts_fail: bool = True) -> None:
    """Until the proxy completes a request (it routes only to instances it found healthy):
    by `deadline`, and at least SERVE_TIMEOUT_S past the moment every engine answered
    /health, so a slow model load is waited out while a proxy that never routes is not."""
    body = {"model": model, "prompt": "warm up", "max_tokens": 1, "temperature": 0}
    reply: object
    while True:
        try:
            status, reply = http_post(live.proxy_url + "/v1/completions", body, timeout=60)
        except OSError as exc:
            status, reply = None, repr(exc)
        if status == 200:
            return
        failed_units(live.plane, live.name, restarts_fail)
        health = engines_health(live)
        if all(code == 200 for code in health.values()):
            deadline = min(deadline, time.monotonic() + SERVE_TIMEOUT_S)
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"proxy of {live.name} does not serve: {status} {reply}; engines' /health: "
                f"{health}\n"
                + "\n".join(log_tail(live.plane, live.name, n) for n in [*live.urls, "proxy"])
            )
        time.sleep(1.0)


def engines_health(live: Live) -> dict[str, int | str]:
    """Each engine's /health status code, or the error that stood in for one."""
    codes: dict[str, int | str] = {}
    for instance, url in live.urls.items():
        try:
            codes[instance] = http_get(url + "/health", timeout=5)[0]
        except OSError as exc:
            codes[instance] = repr(exc)
    return codes


def log_tail(plane: ControlPlane, name: str, instance: str, lines: int = 40) -> str:
    status, body = plane.api("GET", f"/deployments/{name}/logs/{instance}?lines={lines}")
    return f"--- {instance} ---\n" + ("\n".join(body["lines"]) if status == 200 else str(body))


def stop(plane: ControlPlane, name: str) -> dict[str, dict]:
    status, body = plane.api("POST", f"/deployments/{name}/stop")
    assert status == 202, body
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        units = plane.status(name)
        if all(u["state"] in ("STOPPED", "EXITED", "FATAL") for u in units.values()):
            return units
        time.sleep(0.5)
    raise TimeoutError(f"{name} not stopped after {STOP_TIMEOUT_S} s: {plane.status(name)}")


# /proc ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    pgid: int
    sid: int
    cmdline: str


def processes(proc: Path = Path("/proc")) -> list[ProcInfo]:
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        # Fields after the parenthesised command: state ppid pgrp session ...
        fields = stat.rpartition(")")[2].split()
        if fields[0] == "Z":
            continue  # a zombie holds no resources; its parent reaps it
        found.append(ProcInfo(int(entry.name), int(fields[2]), int(fields[3]), cmdline))
    return found


def marked(pid: int, marker: str) -> bool:
    with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
        return f"{MARKER}={marker}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    return False


def foreign(pid: int, marker: str) -> bool:
    """`pid` carries another session's marker: another test worker's deployment."""
    with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        return f"{MARKER}=".encode() in environ and not marked(pid, marker)
    return False


def ancestors() -> set[int]:
    """This process and those above it (the make recipe's shell names the model too)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def leftovers(live: Live, model: Path, marker: str) -> list[ProcInfo]:
    """Processes of `live` still there: in one of its groups or sessions, carrying its marker,
    or any vLLM server or engine core (they retitle themselves `VLLM::EngineCore`) or process
    naming the model that is not another test worker's."""
    mine = ancestors()
    found = []
    for info in processes():
        if info.pid in mine:
            continue
        ours = info.pgid in live.groups or info.sid in live.sessions or marked(info.pid, marker)
        text = info.cmdline.lower()
        engine = str(model) in info.cmdline or "vllm::" in text or "vllm.entrypoints" in text
        if ours or (engine and not foreign(info.pid, marker)):
            found.append(info)
    return found


def wait_gone(live: Live, model: Path, marker: str, timeout: float = 30.0) -> list[ProcInfo]:
    deadline = time.monotonic() + timeout
    left = leftovers(live, model, marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = leftovers(live, model, marker)
    return left


def kill_groups(live: Live) -> None:
    """Safety net after a failed test: SIGKILL every group the deployment spawned."""
    for pgid in live.groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


# Metrics ----------------------------------------------------------------------------------


def families(text: str) -> dict[str, tuple[str, frozenset[str], dict[str, frozenset[str]]]]:
    """name -> (type, label names, values of each label) of every family in `text`."""
    out = {}
    for family in text_string_to_metric_families(text):
        names: set[str] = set()
        values: dict[str, set[str]] = {}
        for sample in family.samples:
            for key, value in sample.labels.items():
                if key in ("le", "quantile"):
                    continue
                names.add(key)
                values.setdefault(key, set()).add(value)
        out[family.name] = (
            family.type,
            frozenset(names),
            {k: frozenset(v) for k, v in values.items()},
        )
    return out


def dump(obj: object) -> str:
    return json.dumps(obj, indent=1, default=sorted)[:4000]
