"""`make bench-switch`: ten read/write switches in a row under load, per strategy.

A real `pdctl serve` runs stand-in MoRIIO deployments (tiny model): 1P1D for hold and
keep-serving, 2P2D (two pairs) for roll. `pdctl bench` offers 10 req/s of 512-token prompts
with 256 output tokens while the switches run back to back. Printed per strategy: requests
sent, completed, failed, lost (no answer at all), rejected (503), the switch times, and
the TTFT of requests that arrived during a switch against those that did not (the baseline,
measured in the same run).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.control_plane import api, stop_and_wait, wait_running
from harness.processes import ROOT, Process, free_port

SWITCHES = 10
RATE = 10.0


def deployment(name: str, pairs: int) -> dict:
    groups = []
    for i in range(pairs):
        groups += [
            {"name": f"prefill-{i}", "role": "prefill", "mode": "read"},
            {"name": f"decode-{i}", "role": "decode", "mode": "read"},
        ]
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "prefix_caching": False,
        "groups": groups,
        "proxy": {"hold_queue": 512, "hold_deadline_s": 60},
    }


def run_strategy(base: str, tmp: Path, strategy: str, pairs: int) -> dict:
    name = f"sw-{strategy}"
    status, created = api(base, "POST", "/deployments", deployment(name, pairs))
    assert status == 201, created
    api(base, "POST", f"/deployments/{name}/start")
    wait_running(base, name)
    proxy = f"http://127.0.0.1:{created['ports']['proxy']}"
    out = tmp / f"{name}.json"
    # Enough load to outlast ten switches on a busy 2-core machine (~12 s each there).
    prompts = int(RATE * (SWITCHES * 14 + 20))
    load = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "pdctl.py"),
            "bench",
            "--base-url",
            proxy,
            "--request-rate",
            str(RATE),
            "--num-prompts",
            str(prompts),
            "--input-len",
            "512",
            "--output-len",
            "256",
            "--result-json",
            str(out),
            "--save-requests",
            "--quiet",
            "--timeout",
            "120",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = time.time()
    time.sleep(3)
    windows, records = [], []
    for i in range(SWITCHES):
        if load.poll() is not None:
            break
        mode = "write" if i % 2 == 0 else "read"
        begin = time.time()
        status, rec = api(
            base,
            "POST",
            f"/deployments/{name}/switch",
            {"mode": mode, "strategy": strategy, "reason": "bench"},
        )
        assert status == 202, rec
        while rec["state"] == "running":
            time.sleep(0.1)
            _, rec = api(base, "GET", f"/deployments/{name}/switches/{rec['id']}")
        windows.append((begin - started, time.time() - started))
        records.append(rec)
    load.wait(timeout=600)
    result = json.loads(out.read_text())
    stop_and_wait(base, name)
    return summarize(strategy, result, records, windows)


def summarize(
    strategy: str, result: dict, records: list[dict], windows: list[tuple[float, float]]
) -> dict:
    during, outside = [], []
    lost = rejected = 0
    for r in result.get("requests", []):
        error = r.get("error") or ""
        if "503" in error:
            rejected += 1
        if not r.get("ok") and ("timeout" in error.lower() or "disconnected" in error.lower()):
            lost += 1
        if not r.get("ok"):
            continue
        start = r.get("start", 0.0)
        inside = any(a <= start <= b for a, b in windows)
        (during if inside else outside).append(r["ttft"] * 1000)
    took = [r["ended_at"] - r["started_at"] for r in records if r.get("ended_at")]
    return {
        "strategy": strategy,
        "switches": len(records),
        "switches_done": sum(r["state"] == "done" for r in records),
        "sent": result["completed"] + result["failed"],
        "completed": result["completed"],
        "failed": result["failed"],
        "lost": lost,
        "rejected": rejected,
        "switch_s_median": statistics.median(took) if took else None,
        "switch_s_max": max(took) if took else None,
        "held_s_median": _median([r.get("held_s") for r in records]),
        "degraded_s_median": _median([r.get("degraded_s") for r in records]),
        "ttft_ms_outside": _median(outside),
        "ttft_ms_during": _median(during),
        "requests_during": len(during),
    }


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        port = free_port()
        serve = Process(
            ["serve", "--port", str(port), "--db", str(tmp / "pdctl.db")],
            port,
            env={"PDCTL_RUNTIME_DIR": str(tmp / "runs")},
            log_path=tmp / "serve.log",
        ).wait_healthy(30)
        rows = []
        try:
            for strategy, pairs in (("hold", 1), ("keep-serving", 1), ("roll", 2)):
                rows.append(run_strategy(serve.url, tmp, strategy, pairs))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            serve.stop()
    print()
    print(
        f"{SWITCHES} switches per strategy under {RATE:g} req/s (512 in / 256 out), "
        "stand-in MoRIIO tiny model"
    )
    header = (
        "strategy",
        "sent",
        "done",
        "failed",
        "lost",
        "503",
        "switch s p50/max",
        "held s",
        "whole s",
        "TTFT ms outside/during",
        "x baseline",
    )
    print(" | ".join(header))
    for r in rows:
        base, during = r["ttft_ms_outside"], r["ttft_ms_during"]
        ratio = f"{during / base:.2f}" if base and during else "-"
        print(
            " | ".join(
                str(x)
                for x in (
                    r["strategy"],
                    r["sent"],
                    r["completed"],
                    r["failed"],
                    r["lost"],
                    r["rejected"],
                    f"{r['switch_s_median']:.2f}/{r['switch_s_max']:.2f}"
                    if r["switch_s_median"]
                    else "-",
                    r["held_s_median"],
                    r["degraded_s_median"],
                    f"{base}/{during}",
                    ratio,
                )
            )
        )


if __name__ == "__main__":
    main()
