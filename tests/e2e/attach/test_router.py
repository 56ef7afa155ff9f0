"""Attach (issue 37): a NIXL 1P1D of stand-ins started by hand behind vllm-router, attached
by URLs with `pdctl attach`. Under `pdctl bench` through the router the live frame's TTFT and
ITL medians (from the engines' own histograms: the proxy is not pdctl's) are within 15% of
the bench's, KV moves, PD happens, the canary passes through the router; the decode killed by
hand is an event within one probe period and the attainment falls; `pdctl start` is refused."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from harness.control_plane import ControlPlane
from harness.processes import running
from harness.stack import (
    RouterProcess,
    bench_background,
    nixl_sim,
    router_binary,
    wait_until,
)
from tests.e2e.attach.watch import at, bench_deployment, events, frame, within
from tests.terminal.verbs_run import pdctl

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not router_binary().exists(), reason="vllm-router is not installed"),
]

NAME = "ext"
PROBE_S = 1.0  # the scrape interval: the probe period of an attached instance
# A 70B model on 4 x L40S: ~130 ms prefills of 256 tokens and ~57 ms decode steps, far above
# a loaded host's few ms of HTTP between router and engines.
MODEL = (
    "--model-profile", "llama-3.1-70b", "--hardware", "l40s", "-tp", "4", "--max-model-len", "4096",
    "--served-model-name", "tiny", "--enable-per-request-metrics",
)  # fmt: skip
LOAD = ("--request-rate", "4", "--num-prompts", "32", "--input-len", "256", "--output-len", "16")


def test_an_attached_router_pair_is_watched_and_not_steered(tmp_path):
    prefill = nixl_sim(tmp_path, "prefill", "kv_producer", *MODEL)
    decode = nixl_sim(tmp_path, "decode", "kv_consumer", *MODEL)
    plane = ControlPlane(tmp_path, {"PDCTL_SCRAPE_INTERVAL": str(PROBE_S)})
    with running(prefill, decode):
        router = RouterProcess(tmp_path, [prefill.url], [decode.url])
        with running(router):
            plane.start()
            try:
                server = plane.server.url
                bad = pdctl(
                    "attach", "bad", "--prefill", prefill.url, "--decode", "ftp://127.0.0.1:1",
                    server=server, token=None,
                )  # fmt: skip
                assert bad.returncode == 2 and "--decode 1" in bad.stderr, bad.stderr
                made = pdctl(
                    "attach", NAME, "--prefill", prefill.url, "--decode", decode.url,
                    "--proxy", router.url, "--proxy-kind", "vllm-router", "--model", "tiny",
                    server=server, token=None,
                )  # fmt: skip
                assert made.returncode == 0, made.stderr
                assert "attached 2 instance(s) behind vllm-router" in made.stdout
                found = pdctl(
                    "attach", "found", "--from-router", router.url, server=server, token=None
                )
                assert found.returncode == 0, found.stderr
                _, spec = plane.api("GET", "/deployments/found")
                assert [g["urls"] for g in spec["spec"]["groups"]] == [[prefill.url], [decode.url]]
                assert spec["spec"]["external_proxy"]["kind"] == "vllm-router"
                _, spec = plane.api("GET", f"/deployments/{NAME}")
                body = {**spec["spec"], "canary": {"interval_s": 2.0, "max_tokens": 8}}
                status, _ = plane.api("PUT", f"/deployments/{NAME}", body)
                assert status == 200

                started = pdctl("start", NAME, server=server, token=None)
                assert started.returncode != 0
                assert "is attached" in started.stderr and "vllm serve" in started.stderr

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
                    "kv": shown["kv"],
                    "attainment": shown["slo_attainment"],
                    "source": shown["latency_source"],
                }
                print("attach figures:", json.dumps(report))
                breakdown, engine = shown["ttft_breakdown"], result.get("engine_metrics")
                print("ttft parts:", json.dumps(breakdown), "bench engine:", json.dumps(engine))
                assert breakdown["source"] == "engines" and breakdown["sum_ms"] > 0, breakdown
                assert breakdown["parts"]["kv_transfer"] > 0, breakdown
                # the decode's own timing reached the client through the router
                assert engine is not None and engine["requests"] == 32, engine
                assert shown["latency_source"] == "engines"
                assert within(report["frame_ttft_p50_ms"], report["bench_ttft_p50_ms"]), report
                assert within(report["frame_itl_p50_ms"], report["bench_itl_p50_ms"]), report
                assert (shown["kv"]["bytes_per_s"] or 0) > 0, report
                shares = [d["share"] for d in shown["pd"]["decodes"]]
                assert shares and all(s is not None and s > 0.9 for s in shares), report
                top = pdctl("top", NAME, "--once", "--json", server=server, token=None)
                assert top.returncode == 0, top.stderr
                seen_by_top = json.loads(top.stdout)
                assert seen_by_top["latency_source"] == "engines"
                assert {i["name"] for i in seen_by_top["instances"]} == {"prefill-0", "decode-0"}
                # the advisor judges the engines' figures, and the history keeps them
                status, advice = plane.api("GET", f"/deployments/{NAME}/advice?window=1m")
                assert status == 200 and advice["live"], advice
                assert advice["verdicts"] and advice["signals"].get("ttft_p99_ms"), advice
                status, kept = plane.api("GET", f"/deployments/{NAME}/history?window=5m")
                assert status == 200 and kept["points"], kept
                canary = wait_until(
                    lambda: (c := frame(plane, NAME)["canary"]).get("last") and c, 20, "a canary"
                )
                assert canary["last"]["result"] == "ok", canary
                timed = canary["last"]["engine_metrics"]  # the decode's own, via the router
                assert timed is not None and timed["time_to_first_token_ms"] > 0, canary
                before = shown["slo_attainment"]
                assert before is not None and before > 0.9, report

                decode.kill()
                killed = time.time()
                down = wait_until(
                    lambda: events(plane, NAME, "attached.instance_down"), 10, "a down event"
                )
                late = at(down[0]) - killed
                print(f"down event {late:.2f} s after the kill: {down[0]['message']}")
                assert late <= PROBE_S + 0.3, late  # one probe period, and writing it
                load = bench_background(router.url, tmp_path, "after", 4.0, 12)
                seen: list[Any] = []

                def fallen() -> bool:
                    now = frame(plane, NAME, "10s")
                    seen.append((now["slo_attainment"], [i["up"] for i in now["instances"]]))
                    return now["slo_attainment"] is not None and now["slo_attainment"] < before

                wait_until(fallen, 30, "the attainment falls")
                after = seen[-1][0]
                print("attainment", before, "->", after)
                print("attainment frames", seen)
                load.wait(timeout=120)
            finally:
                plane.close()
