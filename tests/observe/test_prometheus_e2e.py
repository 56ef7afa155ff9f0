"""A real Prometheus (Debian's package) scrapes `pdctl serve` and a `pdctl proxy` in front of
NIXL stand-ins, and answers histogram_quantile over the proxy's TTFT histogram."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from harness.processes import Process, free_port, http_get, http_post, running
from harness.stack import nixl_sim, proxy

pytestmark = pytest.mark.e2e

PROMETHEUS = shutil.which("prometheus")
TTFT_P50 = "histogram_quantile(0.5, sum(rate(pdctl_proxy_ttft_seconds_bucket[1m])) by (le))"


def query(base: str, expr: str) -> list[dict]:
    status, raw = http_get(f"{base}/api/v1/query?query={urllib.parse.quote(expr)}")
    assert status == 200, raw
    return json.loads(raw)["data"]["result"]


def wait_for(what: str, check, timeout: float = 25.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.25)
    raise TimeoutError(what)


@pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the prometheus binary is not installed "
    "(Debian package 'prometheus'; `make system-deps` installs it)",
)
def test_prometheus_scrapes_the_control_plane_and_the_proxy(tmp_path: Path) -> None:
    plane_port = free_port()
    plane = Process(
        ["serve", "--port", str(plane_port), "--db", str(tmp_path / "pdctl.db")],
        plane_port,
        env={"PDCTL_RUNTIME_DIR": str(tmp_path / "runs")},
        log_path=tmp_path / "serve.log",
    )
    prefill = nixl_sim(tmp_path, "prefill", "kv_producer")
    decode = nixl_sim(tmp_path, "decode", "kv_consumer")
    with running(plane, prefill, decode):
        front = proxy(
            tmp_path,
            "proxy",
            "--connector",
            "nixl",
            "--mode",
            "read",
            "--prefill",
            prefill.url,
            "--decode",
            decode.url,
        )
        with running(front):
            prom_port = free_port()
            config = tmp_path / "prometheus.yml"
            config.write_text(
                "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                "scrape_configs:\n"
                + "".join(
                    f"  - job_name: {job}\n    static_configs: [{{targets: ['127.0.0.1:{p}']}}]\n"
                    for job, p in (("pdctl", plane_port), ("proxy", front.port))
                )
            )
            log = (tmp_path / "prometheus.log").open("wb")
            prom = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            base = f"http://127.0.0.1:{prom_port}"
            try:
                wait_for(
                    "both targets up", lambda: len([r for r in _safe(query, base, "up == 1")]) == 2
                )
                for _ in range(8):
                    status, body = http_post(
                        front.url + "/v1/completions",
                        {"model": "tiny", "prompt": "one two three", "max_tokens": 4},
                    )
                    assert status == 200, body
                    time.sleep(0.25)
                result = wait_for(
                    "a TTFT median",
                    lambda: [
                        r
                        for r in _safe(query, base, TTFT_P50)
                        if not math.isnan(float(r["value"][1]))
                    ],
                )
                p50 = float(result[0]["value"][1])
                assert 0 < p50 < 10
                assert _safe(query, base, "pdctl_deployments")  # the control plane's state
            finally:
                prom.terminate()
                prom.wait(timeout=10)
                log.close()


def _safe(fn, *args) -> list:
    try:
        return fn(*args)
    except OSError:
        return []
