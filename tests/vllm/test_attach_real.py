"""Attach on real vLLM (issue 37): a NIXL pair of plain `vllm serve` processes and a
vllm-router in front, all started by the test, not by pdctl; `pdctl attach` through a real
`pdctl serve`. Under `pdctl bench --deployment` (through the router) the live frame's TTFT and
ITL come from the engines' own histograms (the proxy is not pdctl's), KV moves, PD happens
for nearly every prompt token, the canary passes through the router, and `pdctl start` is
refused: pdctl does not own the processes.

Measured here (2 cores, load average ~20): bench TTFT median 6949 ms, the frame's 6950 (the
legs' means added); bench ITL median 53.5 ms, the frame's 35.8 (the decode's own
inter-token histogram: the client's adds the API server's and the router's streaming on a
starved host, and the bench warned its own loop ran 23 ms late); PD share 1.0; the
pair served 304 s after launch, the test took 419 s."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from harness.processes import ROOT, http_post
from harness.stack import RouterProcess, router_binary, wait_until
from tests.terminal.verbs_run import environment, pdctl
from tests.vllm import harness
from tests.vllm.by_hand import VllmServe

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not router_binary().exists(), reason="vllm-router is not installed"),
]

NAME = "attached-vllm"
# 20 short requests, two at a time: a CPU pair on two cores busy with other work serves one
# prompt of ~700 tokens in seconds (measured under a load average of 20), so prompts stay short.
REQUESTS = 20
LOAD = (
    "--request-rate", "2", "--num-prompts", str(REQUESTS), "--input-len", "64",
    "--output-len", "8", "--max-concurrency", "2", "--seed", "37", "--timeout", "120",
)  # fmt: skip
BENCH_TIMEOUT_S = 420.0


def serve_through(url: str, model: str) -> None:
    """Until `url` answers a completion (the router has found its workers, NIXL handshaked)."""
    body = {"model": model, "prompt": harness.prompt(1), "max_tokens": 2, "temperature": 0}
    deadline, last = time.monotonic() + harness.SERVE_TIMEOUT_S, ""
    while time.monotonic() < deadline:
        try:
            status, reply = http_post(url + "/v1/completions", body, timeout=60)
            last = str(reply)[:300]
        except OSError as exc:
            status, last = None, repr(exc)
        if status == 200:
            return
        time.sleep(1.0)
    raise TimeoutError(f"{url} does not serve: {last}")


def frame(plane, window: str = "5m") -> dict[str, Any]:
    from websockets.sync.client import connect

    url = f"ws://127.0.0.1:{plane.port}/ws/deployments/{NAME}?window={window}"
    with connect(url, open_timeout=10) as ws:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message["type"] == "frame":
                return message
    raise TimeoutError(f"no frame of {NAME} within 30 s")


def bench_deployment(tmp: Path, server: str, model: str) -> subprocess.Popen:
    """`pdctl bench --deployment NAME` in the background: the load goes to the attached
    deployment's proxy (the router); its result is TMP/bench.json, its stderr TMP/bench.err."""
    argv = [
        sys.executable, str(ROOT / "pdctl.py"), "bench", "--deployment", NAME,
        "--server", server, "--result-json", str(tmp / "bench.json"), "--quiet",
        "--model", model, *LOAD,
    ]  # fmt: skip
    with (tmp / "bench.err").open("wb") as err:
        return subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env=environment(None, None, None)
        )


def judged(plane, bench: subprocess.Popen) -> list[float] | None:
    """Each decode's share of prompt tokens that came by KV transfer, over pd_check's window,
    once every one is above 90% (None while no traffic flows in the window); an error once
    the load ended without that."""
    running = bench.poll() is None
    got = [d["share"] for d in frame(plane, "10s")["pd"]["decodes"]]
    if got and all(x is not None and x > 0.9 for x in got):
        return got
    assert running, f"the load ended with the decodes' shares at {got}"
    return None


def canary_every(plane, seconds: float) -> None:
    _, stored = plane.api("GET", f"/deployments/{NAME}")
    body = {**stored["spec"], "canary": {"interval_s": seconds, "max_tokens": 8}}
    status, answer = plane.api("PUT", f"/deployments/{NAME}", body)
    assert status == 200, answer


def forget(plane) -> None:
    """Delete the attached deployment (if stored): the session's plane would go on watching
    its stopped engines."""
    request = urllib.request.Request(f"{plane.server.url}/api/deployments/{NAME}", method="DELETE")
    with contextlib.suppress(urllib.error.HTTPError), urllib.request.urlopen(request, timeout=30):
        pass


def test_a_vllm_pair_started_by_hand_is_attached_watched_and_not_started(
    plane, vllm_setup, tmp_path
):
    began = time.monotonic()
    model = str(vllm_setup.model)
    server = plane.server.url
    engines = [
        VllmServe(tmp_path, name, vllm_setup.python, vllm_setup.model, core, vllm_setup.marker)
        for name, core in (("prefill", 0), ("decode", 1))
    ]
    prefill, decode = engines
    router: RouterProcess | None = None
    try:
        for engine in engines:
            engine.wait_healthy(harness.START_TIMEOUT_S)
        router = RouterProcess(tmp_path, [prefill.url], [decode.url])
        router.wait_healthy(30)
        serve_through(router.url, model)
        started = time.monotonic() - began

        made = pdctl(
            "attach", NAME, "--prefill", prefill.url, "--decode", decode.url,
            "--proxy", router.url, "--proxy-kind", "vllm-router", "--model", model,
            server=server, token=None,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert "attached 2 instance(s) behind vllm-router" in made.stdout
        canary_every(plane, 0)  # no canary while the bench's figures are taken

        status, refused = plane.api("POST", f"/deployments/{NAME}/start")
        assert status == 409, refused
        cli = pdctl("start", NAME, server=server, token=None)
        assert cli.returncode != 0
        assert "is attached" in cli.stderr and "vllm serve" in cli.stderr, cli.stderr

        bench = bench_deployment(tmp_path, server, model)  # through the router
        try:  # PD judged while the load flows: nearly every prompt token arrived by transfer
            seen = wait_until(lambda: judged(plane, bench), BENCH_TIMEOUT_S, "PD judged")
            assert bench.wait(timeout=BENCH_TIMEOUT_S) == 0, (tmp_path / "bench.err").read_text()
        finally:
            if bench.poll() is None:
                bench.kill()
                bench.wait()
        result = json.loads((tmp_path / "bench.json").read_text())
        assert result["completed"] == REQUESTS, result
        time.sleep(1.5)  # a scrape after the last request
        shown = frame(plane)
        report = {
            "bench_ttft_p50_ms": round(result["median_ttft_ms"], 1),
            "frame_ttft_p50_ms": round((shown["ttft"]["p50"] or 0) * 1000, 1),
            "bench_itl_p50_ms": round(result["median_itl_ms"], 1),
            "frame_itl_p50_ms": round((shown["itl"]["p50"] or 0) * 1000, 1),
            "ttft_count": shown["ttft"]["count"],
            "itl_count": shown["itl"]["count"],
            "pd_shares_under_load": seen,
            "kv": shown["kv"],
            "source": shown["latency_source"],
            "instances": {i["name"]: i["up"] for i in shown["instances"]},
        }
        print("attach figures on real vLLM:", json.dumps(report))
        assert shown["latency_source"] == "engines", report
        assert report["instances"] == {"prefill-0": True, "decode-0": True}, report
        assert shown["ttft"]["count"] > 0 and shown["itl"]["count"] > 0, report
        assert shown["ttft"]["p50"] is not None and shown["itl"]["p50"] is not None, report
        assert (shown["kv"]["bytes_per_s"] or 0) > 0 and shown["kv"]["source"] == "nixl", report

        canary_every(plane, 2.0)
        canary = wait_until(
            lambda: (c := frame(plane)["canary"]).get("last") and c, 240, "a canary verdict"
        )
        print("canary through vllm-router:", json.dumps(canary["last"]))
        assert canary["last"]["result"] == "ok", canary
    finally:
        # Each runs even if one before it raises (a router slow to exit once left both
        # engines running for the rest of the suite); the first error is raised after.
        with contextlib.ExitStack() as cleanup:
            for engine in engines:
                cleanup.callback(engine.stop)
            if router is not None:
                cleanup.callback(router.stop)
            cleanup.callback(forget, plane)
    assert not [p for e in engines for p in e.left()], "vllm serve left processes behind"
    print(f"pair serving {started:.0f} s after launch; test {time.monotonic() - began:.0f} s")
