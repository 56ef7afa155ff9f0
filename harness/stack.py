"""Real PD stacks for the end-to-end tests: stand-ins, `pdctl proxy`, `pdctl bench`, vllm-router.

Everything binds free loopback ports; every helper that waits is bounded in time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.processes import (
    ADMIN,
    ADMIN_TOKEN,
    ROOT,
    Process,
    free_port,
    http_get,
    metric_value,
    sim,
)

# The default stand-in: the tiny model on the cpu profile (milliseconds per step).
TINY: tuple[str, ...] = ()
# A stand-in whose TTFT and ITL land in the middle of vLLM's histogram buckets.
L40S_8B = ("--model-profile", "llama-3.1-8b", "--hardware", "l40s", "--kv-link-gbps", "50")


def nixl_sim(
    tmp: Path, name: str, role: str, *flags: str, extra: dict[str, Any] | None = None
) -> Process:
    """A NIXL stand-in; `extra`: its kv_connector_extra_config (e.g. bidirectional_kv_xfer)."""
    config: dict[str, Any] = {"kv_connector": "NixlConnector", "kv_role": role}
    if extra:
        config["kv_connector_extra_config"] = extra
    return sim(
        tmp,
        name,
        *flags,
        "--kv-transfer-config",
        json.dumps(config),
        env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())},
    )


def moriio_sim(
    tmp: Path, name: str, role: str, read_mode: bool, registry_port: int | None = None, *flags: str
) -> Process:
    """A MoRIIO stand-in; with `registry_port` it registers with that proxy every 0.2 s."""
    port = free_port()
    extra: dict[str, Any] = {
        "http_port": str(port),
        "handshake_port": str(free_port()),
        "notify_port": str(free_port()),
        "read_mode": "true" if read_mode else "false",
    }
    if registry_port is not None:
        extra |= {"proxy_ip": "127.0.0.1", "proxy_ping_port": str(registry_port)}
        flags = (*flags, "--registration-interval", "0.2")
    config = {
        "kv_connector": "MoRIIOConnector",
        "kv_role": role,
        "kv_connector_extra_config": extra,
    }
    return sim(
        tmp,
        name,
        *flags,
        "--no-enable-prefix-caching",
        "--kv-transfer-config",
        json.dumps(config),
        port=port,
    )


def zmq_address(proc: Process) -> str:
    """The `host:IP,handshake:P,notify:P` of a MoRIIO stand-in started by moriio_sim."""
    config = json.loads(proc.args[proc.args.index("--kv-transfer-config") + 1])
    extra = config["kv_connector_extra_config"]
    return f"host:127.0.0.1,handshake:{extra['handshake_port']},notify:{extra['notify_port']}"


def proxy(
    tmp: Path, name: str, *flags: str, registry_port: int = -1, host: str = "127.0.0.1"
) -> Process:
    """`pdctl proxy` on `host` (HTTP and registry); registry off unless a port is given.
    Heartbeats expire 5x sooner (1.8 s of silence for a stand-in that registers every 0.2 s)."""
    port = free_port()
    return Process(
        [
            "proxy",
            "--host",
            host,
            "--port",
            str(port),
            "--registry-port",
            str(registry_port),
            "--heartbeat-scale",
            "0.2",
            *flags,
        ],
        port,
        env={"PDCTL_ADMIN_TOKEN": ADMIN_TOKEN},
        log_path=tmp / f"{name}.log",
        host=host,
    )


def bench(
    tmp: Path, base_url: str, *flags: str, name: str = "bench", timeout: float = 60.0
) -> dict[str, Any]:
    """Run `pdctl bench` as a subprocess and return its --result-json document."""
    out = tmp / f"{name}.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "pdctl.py"),
            "bench",
            "--base-url",
            base_url,
            "--result-json",
            str(out),
            "--quiet",
            *flags,
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(out.read_text())


def bench_background(
    base_url: str, tmp: Path, name: str, rate: float, prompts: int, *flags: str
) -> subprocess.Popen:
    """`pdctl bench` of 128 in / 32 out at `rate` against `base_url`, in the background; its
    --result-json is TMP/NAME.json and its stderr TMP/NAME.err (`bench_finished` reads both)."""
    argv = [
        sys.executable,
        str(ROOT / "pdctl.py"),
        "bench",
        "--base-url",
        base_url,
        "--request-rate",
        str(rate),
        "--num-prompts",
        str(prompts),
        "--input-len",
        "128",
        "--output-len",
        "32",
        "--result-json",
        str(tmp / f"{name}.json"),
        "--model",
        "tiny",
        "--quiet",
        "--timeout",
        "90",
        *flags,
    ]
    with (tmp / f"{name}.err").open("wb") as err:
        return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)


def bench_finished(proc: subprocess.Popen, tmp: Path, name: str) -> dict[str, Any]:
    assert proc.wait(timeout=180) == 0, (tmp / f"{name}.err").read_text()
    return json.loads((tmp / f"{name}.json").read_text())


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise TimeoutError(f"not true after {timeout}s: {what or predicate}")


def instances(proxy_proc: Process) -> list[dict[str, Any]]:
    status, raw = http_get(proxy_proc.url + "/admin/instances", headers=ADMIN)
    assert status == 200, raw
    data = json.loads(raw)
    return data["instances"] if isinstance(data, dict) else data


def gauge(proc: Process, name: str, **labels: str) -> float:
    return metric_value(proc.metrics(), name, **labels)


def aborted(proc: Process) -> float:
    return gauge(proc, "vllm:request_success_total", finished_reason="abort")


def histogram_median_bucket(text: str, name: str) -> tuple[float, float]:
    """(lower, upper) bounds of the bucket holding the median of a Prometheus histogram."""
    buckets = histogram_buckets(text, name)
    total = buckets[-1][1]
    lower = 0.0
    for bound, cumulative in buckets:
        if cumulative >= total / 2:
            return lower, bound
        lower = bound
    raise AssertionError(f"{name} is empty")


def histogram_buckets(text: str, name: str) -> list[tuple[float, float]]:
    from prometheus_client.parser import text_string_to_metric_families

    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name + "_bucket":
                le = float(sample.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + sample.value
    assert buckets, f"no {name} in the metrics"
    return sorted(buckets.items())


def bucket_index(buckets: list[tuple[float, float]], value: float) -> int:
    """Index of the bucket (le semantics) that holds `value`."""
    for i, (bound, _) in enumerate(buckets):
        if value <= bound:
            return i
    return len(buckets) - 1


class RouterProcess(Process):
    """vllm-router (the Rust PD router from PyPI) in NIXL PD mode over given instances."""

    def __init__(self, tmp: Path, prefill: list[str], decode: list[str], *flags: str) -> None:
        port = free_port()
        args = [
            "--vllm-pd-disaggregation",
            "--kv-connector",
            "nixl",
            "--policy",
            "round_robin",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--prometheus-port",
            str(free_port()),
            "--log-level",
            "warning",
        ]
        for url in prefill:
            args += ["--prefill", url]
        for url in decode:
            args += ["--decode", url]
        self.args, self.port = [*args, *flags], port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = tmp / "vllm-router.log"
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [str(router_binary()), *self.args],
                cwd=tmp,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


def router_binary() -> Path:
    return Path(sys.executable).parent / "vllm-router"


def send(proc: Process, sig: int) -> None:
    """A signal that need not end the process (SIGSTOP, SIGCONT): no waiting for its exit."""
    import os

    os.killpg(proc.proc.pid, sig)
