"""Attach by discovery (issue 37): NIXL stand-ins started by hand, a real Prometheus
(Debian's package) scraping them with llm-d's role label from a file_sd file, and the pair
attached with `pdctl attach --discover-prometheus` behind the real vllm-router. Under
`pdctl bench` through the router the frame's TTFT and ITL medians (from the engines' own
histograms) are within 15% of the bench's, KV moves, PD happens; a third stand-in written into
Prometheus's targets is picked up and the one taken out is dropped, each an event. The same
pair found from the router's worker list (`--discover-router`) is watched too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from harness.control_plane import ControlPlane
from harness.processes import Process, free_port, http_get, running
from harness.stack import RouterProcess, nixl_sim, router_binary, wait_until
from tests.e2e.attach.watch import at, bench_deployment, events, frame, within
from tests.terminal.verbs_run import pdctl

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not router_binary().exists(), reason="vllm-router is not installed"),
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="the prometheus binary is not installed (Debian package 'prometheus')",
    ),
]

NAME = "found"
PROBE_S = 1.0
EVERY_S = 1.0  # how often discovery asks Prometheus again
# As tests/e2e/attach/test_router.py: engine steps far above a loaded host's HTTP overhead.
MODEL = (
    "--model-profile", "llama-3.1-70b", "--hardware", "l40s", "-tp", "4", "--max-model-len", "4096",
    "--served-model-name", "tiny",
)  # fmt: skip
LOAD = ("--request-rate", "4", "--num-prompts", "32", "--input-len", "256", "--output-len", "16")


def write_targets(path: Path, instances: dict[str, Process]) -> None:
    """Prometheus's file_sd file: each stand-in with its role, the key up to a `-` (written
    whole, then renamed)."""
    groups = [
        {"targets": [f"127.0.0.1:{proc.port}"], "labels": {"llm_d_ai_role": role.split("-")[0]}}
        for role, proc in instances.items()
    ]
    part = path.with_suffix(".part")
    part.write_text(json.dumps(groups))
    os.replace(part, path)


def start_prometheus(tmp: Path, targets: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: vllm\n"
        f"    file_sd_configs: [{{files: ['{targets}'], refresh_interval: 1s}}]\n"
    )
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    return proc, f"http://127.0.0.1:{port}"


def active_targets(base: str) -> list[str]:
    try:
        status, raw = http_get(base + "/api/v1/targets?state=active", timeout=5)
    except OSError:
        return []
    if status != 200:
        return []
    return [t["scrapeUrl"] for t in json.loads(raw)["data"]["activeTargets"]]


def found_urls(plane: ControlPlane, name: str = NAME) -> dict[str, str]:
    _, rows = plane.api("GET", f"/deployments/{name}/status")
    return {r["name"]: r["url"] for r in rows if r["role"] != "proxy"}


def routed_spec(router: str) -> dict[str, Any]:
    found = {"router": router, "every_s": EVERY_S}
    return {
        "name": "routed",
        "engine": "external",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [{"name": r, "role": r, "discover": found} for r in ("prefill", "decode")],
        "external_proxy": {"url": router, "kind": "vllm-router"},
    }


def _told(plane: ControlPlane, what: str, url: str) -> list[dict[str, Any]]:
    return [
        e for e in events(plane, NAME, f"attached.instance_{what}") if e["detail"]["url"] == url
    ]


def test_a_pair_found_in_prometheus_is_watched_and_followed(tmp_path):
    prefill = nixl_sim(tmp_path, "prefill", "kv_producer", *MODEL)
    decode = nixl_sim(tmp_path, "decode", "kv_consumer", *MODEL)
    third = nixl_sim(tmp_path, "prefill-b", "kv_producer", *MODEL)
    sd = tmp_path / "targets.json"
    write_targets(sd, {"prefill": prefill, "decode": decode})
    plane = ControlPlane(tmp_path, {"PDCTL_SCRAPE_INTERVAL": str(PROBE_S)})
    prom, prom_url = start_prometheus(tmp_path, sd)  # while the stand-ins start
    pool = ThreadPoolExecutor(1)
    serving = pool.submit(plane.start)  # and the control plane too
    try:
        with running(prefill, decode, third):
            router = RouterProcess(tmp_path, [prefill.url], [decode.url])
            with running(router):
                wait_until(lambda: len(active_targets(prom_url)) == 2, 20, "Prometheus's targets")
                serving.result(timeout=90)
                server = plane.server.url
                made = pdctl(
                    "attach", NAME, "--discover-prometheus", prom_url, "--match", "job=vllm",
                    "--discover-every", str(EVERY_S), "--proxy", router.url,
                    "--proxy-kind", "vllm-router", server=server, token=None,
                )  # fmt: skip
                assert made.returncode == 0, made.stderr
                assert f"attached by discovery from {prom_url}" in made.stdout, made.stdout
                # the same pair from the router's worker list (the CLI's flags: tests/terminal)
                status, _ = plane.api("POST", "/deployments", routed_spec(router.url))
                assert status == 201

                pair = {"prefill-0": prefill.url, "decode-0": decode.url}
                wait_until(lambda: found_urls(plane) == pair, 15, "the pair discovered")
                wait_until(lambda: found_urls(plane, "routed") == pair, 15, "the router's pair")
                status, refused = plane.api("POST", f"/deployments/{NAME}/start")
                assert status == 409 and "is attached" in refused["detail"], refused

                result = bench_deployment(tmp_path, server, NAME, LOAD)  # through the router
                assert result["completed"] == 32
                time.sleep(PROBE_S * 1.5)  # the last scrape after the last request
                shown = frame(plane, NAME)
                report = {
                    "bench_ttft_p50_ms": result["median_ttft_ms"],
                    "frame_ttft_p50_ms": (shown["ttft"]["p50"] or 0) * 1000,
                    "bench_itl_p50_ms": result["median_itl_ms"],
                    "frame_itl_p50_ms": (shown["itl"]["p50"] or 0) * 1000,
                    "pd_shares": [d["share"] for d in shown["pd"]["decodes"]],
                    "kv_bytes_per_s": shown["kv"]["bytes_per_s"],
                    "discovery": shown["discovery"],
                }
                print("discovery figures:", json.dumps(report))
                assert shown["latency_source"] == "engines"
                assert within(report["frame_ttft_p50_ms"], report["bench_ttft_p50_ms"]), report
                assert within(report["frame_itl_p50_ms"], report["bench_itl_p50_ms"]), report
                assert (shown["kv"]["bytes_per_s"] or 0) > 0, report
                shares = report["pd_shares"]
                assert shares and all(s is not None and s > 0.9 for s in shares), report
                assert {d["group"]: d["found"] for d in shown["discovery"]} == {
                    "prefill": {"prefill-0": prefill.url},
                    "decode": {"decode-0": decode.url},
                }

                # the third stand-in written into Prometheus's targets: picked up
                added = time.time()
                write_targets(sd, {"prefill": prefill, "decode": decode, "prefill-b": third})
                wait_until(lambda: len(active_targets(prom_url)) == 3, 30, "in Prometheus")
                listed = time.time()  # Prometheus's own lag: its discovery sends every 5 s
                appeared = wait_until(lambda: _told(plane, "appeared", third.url), 30, "picked up")
                picked = at(appeared[0]) - added
                three = {"prefill-0": prefill.url, "prefill-1": third.url, "decode-0": decode.url}
                assert found_urls(plane) == three
                # the first prefill taken out: dropped, the others keep their names
                removed = time.time()
                write_targets(sd, {"decode": decode, "prefill-b": third})
                wait_until(lambda: len(active_targets(prom_url)) == 2, 30, "out of Prometheus")
                unlisted = time.time()
                gone = wait_until(lambda: _told(plane, "gone", prefill.url), 30, "dropped")
                dropped = at(gone[0]) - removed
                print(
                    f"picked up {picked:.2f} s after the write ({at(appeared[0]) - listed:.2f} s "
                    f"after Prometheus listed it), dropped {dropped:.2f} s after "
                    f"({at(gone[0]) - unlisted:.2f} s after Prometheus did)"
                )
                assert "is no longer in Prometheus" in gone[0]["message"], gone
                assert found_urls(plane) == {"prefill-1": third.url, "decode-0": decode.url}
                assert picked < 15 and dropped < 15, (picked, dropped)
    finally:
        pool.shutdown(wait=True)  # started or failed: closed either way
        plane.close()
        prom.terminate()
        prom.wait(timeout=10)
